// Stage 18 (CLI): --cache-type / --numerics, shared by generate, --cnv and bench.
#include "engine_flags.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

#include "core/config.h"
#include "core/log.h"
#include "engine/reasoning.h"
#include "files.h"
#include "graph/params.h"
#include "kv/cells.h"

namespace minfer::cli {

void add_kv_flags(ArgParser& p, KvFlags& flags) {
  p.string_opt("--cache-type", "TYPE",
               "KV cache element type of K and V: f32 (default), f16, q8_0 or q4_0\n"
               "(env MINFER_CACHE_TYPE)",
               flags.cache_type);
  p.string_opt("-ctk,--cache-type-k", "TYPE", "the K cache's type (over --cache-type)",
               flags.cache_type_k);
  p.string_opt("-ctv,--cache-type-v", "TYPE", "the V cache's type (over --cache-type)",
               flags.cache_type_v);
  p.string_opt("--numerics", "MODE",
               "default, or llamacpp: reproduce llama.cpp's CPU arithmetic bit for bit\n"
               "(its default build: f16 KV cache, AVX2-order kernels, Q4_0/Q4_K in its\n"
               "repack order; slower), llamacpp-norepack: the same without its CPU_REPACK\n"
               "buffer (use_extra_bufts=false), or llamacpp-avx512fp16: llamacpp as its native\n"
               "build on an AVX512-FP16 CPU runs flash attention (f16 arithmetic)\n"
               "(env MINFER_NUMERICS)",
               flags.numerics);
  p.string_opt("-dev,--device", "NAME[,NAME...]",
               "the devices to run on besides the CPU, in order (minfer --list-devices names\n"
               "them; none or cpu: the CPU alone, the default)",
               flags.device);
  p.option("-ngl,--gpu-layers,--n-gpu-layers", "N",
           "run the last N repeating layers on the first --device (N past the layer count,\n"
           "or -1: every layer and the output head, as llama.cpp); with the CPU alone: a\n"
           "notice, every layer on the CPU",
           [&flags](const std::string& v) -> Status {
             MINFER_TRY(const int64_t n, parse_int(v, "-ngl", -1, INT32_MAX));
             flags.n_gpu_layers = static_cast<int32_t>(n);
             flags.ngl_given = true;
             return Ok{};
           });
}

std::optional<std::string> ngl_notice(const KvFlags& flags) {
  if (!flags.ngl_given || flags.n_gpu_layers == 0) return std::nullopt;
  bool device = false;
  for (size_t at = 0; at <= flags.device.size();) {
    const size_t comma = std::min(flags.device.find(',', at), flags.device.size());
    const std::string name = flags.device.substr(at, comma - at);
    if (!name.empty() && name != "cpu" && name != "none") device = true;
    at = comma + 1;
  }
  if (device) return std::nullopt;
  if (backend::Registry::global().devices().empty()) {
    return fmt::format("-ngl {}: this build has no GPU backend; every layer runs on the CPU",
                       flags.n_gpu_layers);
  }
  return fmt::format("-ngl {}: no device named (--device); every layer runs on the CPU",
                     flags.n_gpu_layers);
}

void add_reasoning_flags(ArgParser& p, bool& split, int32_t& budget, const std::string& format_help,
                         const std::string& budget_help) {
  p.option("--reasoning-format", "FORMAT", format_help, [&split](const std::string& v) -> Status {
    const auto s = engine::reasoning_split_for(v);
    if (!s) return make_error("--reasoning-format must be none, deepseek or auto, got '" + v + "'");
    split = *s;
    return Ok{};
  });
  p.int_opt("--reasoning-budget", "N", budget_help, budget, -1, int64_t{1} << 30);
}

void add_compat_flags(ArgParser& p, std::vector<std::string>& notices, bool& mlock) {
  p.optional_value(
      "-fa,--flash-attn", {"on", "off", "auto"},
      "ignored: the CPU attention is always the fused online-softmax one",
      [&notices](const std::string&) -> Status {
        notices.push_back("-fa: ignored; the CPU attention always runs fused (flash-style)");
        return Ok{};
      });
  p.flag("--no-mmap", "ignored: weights are always memory-mapped", [&notices] {
    notices.push_back("--no-mmap: ignored; this build always memory-maps the weights");
  });
  p.flag("--mlock", "lock the model's memory in RAM (mlockall; a warning if refused)",
         [&mlock] { mlock = true; });
}

void lock_memory() {
  if (::mlockall(MCL_CURRENT) != 0) {
    log_info("warning: --mlock: mlockall failed: {} (the model stays pageable)",
             std::strerror(errno));
  }
}

Result<engine::EngineOptions> engine_options(int32_t n_threads, const KvFlags& flags) {
  const Config& config = Config::get();
  engine::EngineOptions options{.n_threads = n_threads,
                                .rebuild_trace = config.rebuild_trace,
                                .graph_trace = config.graph_trace};
  const bool numerics_flag = !flags.numerics.empty();
  const std::string& numerics = numerics_flag ? flags.numerics : config.numerics;
  if (!numerics.empty()) {
    auto parsed = engine::parse_numerics(numerics);
    if (!parsed) return parsed.error().context(numerics_flag ? "--numerics" : "MINFER_NUMERICS");
    options.numerics = *parsed;
  }
  options.n_gpu_layers = flags.n_gpu_layers;
  if (!flags.device.empty() && flags.device != "none") {
    size_t at = 0;
    for (;;) {
      const size_t comma = flags.device.find(',', at);
      std::string name = flags.device.substr(at, comma - at);
      if (name.empty())
        return make_error(fmt::format("--device '{}': an empty name", flags.device));
      options.devices.push_back(std::move(name));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    // Unknown names are found here, before the model is opened.
    for (const std::string& name : options.devices) {
      bool known = false;
      std::string names;
      for (const backend::DeviceInfo& d : engine::list_devices()) {
        names += (names.empty() ? "" : ", ") + d.name;
        known = known || d.name == name;
      }
      if (!known)
        return make_error(
            fmt::format("--device: unknown device '{}' (available: {})", name, names));
    }
  }
  // Each of K and V: its own flag, else --cache-type, else MINFER_CACHE_TYPE, else the
  // default (f16 under llama.cpp's numerics, f32 otherwise). A type the parser knows but
  // the KV store does not hold is a usage error too, found before the model is opened.
  auto resolve = [&](const std::string& own, std::string_view own_name,
                     graph::KvFormat fallback) -> Result<graph::KvFormat> {
    std::string_view from = own_name;
    const std::string* type = &own;
    if (type->empty()) {
      from = "--cache-type";
      type = &flags.cache_type;
    }
    if (type->empty()) {
      from = "MINFER_CACHE_TYPE";
      type = &config.cache_type;
    }
    if (type->empty()) return fallback;
    auto parsed = graph::parse_kv_format(*type);
    if (!parsed) return parsed.error().context(std::string(from));
    if (auto dt = kv::kv_dtype(*parsed); !dt) return dt.error().context(std::string(from));
    return *parsed;
  };
  const graph::KvFormat fallback =
      engine::llamacpp_family(options.numerics) ? graph::KvFormat::kF16 : graph::KvFormat::kF32;
  MINFER_TRY(options.kv_format.k, resolve(flags.cache_type_k, "-ctk", fallback));
  MINFER_TRY(options.kv_format.v, resolve(flags.cache_type_v, "-ctv", fallback));
  return options;
}

Result<std::unique_ptr<engine::Engine>> open_engine(const std::string& path,
                                                    const engine::EngineOptions& options) {
  MINFER_TRY_STATUS(check_model_file(path));
  try {
    return engine::Engine::open(path, options);
  } catch (const std::system_error& e) {
    return make_error(
        fmt::format("cannot start {} worker thread(s): {}", options.n_threads, e.what()));
  }
}

Status require_generative(const engine::Context& e, const std::string& command) {
  if (!e.hparams().embeddings_out) return Ok{};
  return make_error(fmt::format(
      "{}: the model is an embedding model ({}): it gives vectors, not text; use `minfer "
      "embed` or `minfer serve`",
      command, e.hparams().arch));
}

}  // namespace minfer::cli
