// Stage 15 (the loop): the context — model load, KV sizing, params → reuse or rebuild,
// session KV export/import; decode.cpp is the one forward (place KV → fill inputs →
// execute → logits), the shape of forward_cached in the seed design with the checks
// moved before any work.
#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "alloc/allocator.h"
#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/config.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "graph/fusion.h"
#include "graph/input_names.h"
#include "model/layers.h"

namespace minfer::engine {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

namespace {

// The weights every forward reads whole are mapped in at load, as llama.cpp's loader does
// (MAP_POPULATE), so the first request pays no page faults for them (the kernel maps them
// in large batches, and threads do not contend for the page tables mid-GEMM). Left to
// fault in on use: a token embedding that is only gathered row by row (an untied one)
// and MoE experts (read as routed), whose untouched rows would only add resident memory.
void populate_weights(const model::ModelWeights& w) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  w.for_each([&](const model::WeightRef& r) {
    if (!r.present() || r.bytes == 0) return;
    if (&r == &w.tok_embd && !w.output_tied) return;
    if (r.name.find("_exps") != std::string::npos) return;
    const auto lo = reinterpret_cast<uintptr_t>(r.data);
    ranges.emplace_back(lo, lo + r.bytes);
  });
  std::sort(ranges.begin(), ranges.end());
  constexpr uintptr_t kGap = 1 << 16;  // neighbours this close share one call
  for (size_t i = 0; i < ranges.size();) {
    auto [lo, hi] = ranges[i];
    for (++i; i < ranges.size() && ranges[i].first <= hi + kGap; ++i) {
      hi = std::max(hi, ranges[i].second);
    }
    populate_pages(reinterpret_cast<const void*>(lo), hi - lo);
  }
}

}  // namespace

Result<std::shared_ptr<const LoadedModel>> LoadedModel::open(const std::string& path) {
  MINFER_TRY(gguf::Model file, gguf::Model::open(path));
  return create(std::move(file));
}

Result<std::shared_ptr<const LoadedModel>> LoadedModel::create(gguf::Model file) {
  auto m = std::shared_ptr<LoadedModel>(new LoadedModel());
  m->file_ = std::move(file);
  MINFER_TRY(m->model_, model::Model::load(m->file_));
  populate_weights(m->model_->weights());
  if (m->file_.has("tokenizer.ggml.model")) {
    MINFER_TRY(m->tokenizer_, tokenizer::Tokenizer::from_gguf(m->file_));
    if (m->tokenizer_->n_vocab() != static_cast<int32_t>(m->model_->hparams().n_vocab)) {
      return make_error(fmt::format("tokenizer has {} tokens but the model's vocabulary is {}",
                                    m->tokenizer_->n_vocab(), m->model_->hparams().n_vocab));
    }
    m->token_bytes_ = std::make_unique<TokenBytes>(*m->tokenizer_);
  }
  return std::shared_ptr<const LoadedModel>(std::move(m));
}

const tokenizer::Tokenizer& LoadedModel::tokenizer() const {
  MINFER_CHECK(tokenizer_ != nullptr, "Engine::tokenizer: the model has no tokenizer metadata");
  return *tokenizer_;
}

const TokenBytes& LoadedModel::token_bytes() const {
  MINFER_CHECK(token_bytes_ != nullptr, "Engine::token_bytes: the model has no tokenizer metadata");
  return *token_bytes_;
}

Result<std::unique_ptr<Engine>> Engine::open(const std::string& path,
                                             const EngineOptions& options) {
  MINFER_TRY(gguf::Model file, gguf::Model::open(path));
  return create(std::move(file), options);
}

Result<std::unique_ptr<Engine>> Engine::create(gguf::Model file, const EngineOptions& options) {
  MINFER_TRY(std::shared_ptr<const LoadedModel> model, LoadedModel::create(std::move(file)));
  auto e = std::unique_ptr<Engine>(new Engine(std::move(model)));
  MINFER_TRY_STATUS(e->init(options));
  return e;
}

Result<std::unique_ptr<Context>> Context::create(std::shared_ptr<const LoadedModel> model,
                                                 const EngineOptions& options) {
  if (model == nullptr) return make_error("Context::create: no model");
  auto c = std::unique_ptr<Context>(new Context(std::move(model)));
  MINFER_TRY_STATUS(c->init(options));
  return c;
}

std::vector<backend::DeviceInfo> list_devices(int32_t n_threads) {
  namespace cpu = backend::cpu;
  cpu::CpuIsa isa = cpu::detect_isa();
  if (auto pinned = cpu::isa_from_name(Config::get().cpu_isa);
      pinned && *pinned != cpu::CpuIsa::kAuto) {
    isa = *pinned;
  }
  const int32_t threads =
      n_threads > 0 ? n_threads
                    : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<backend::DeviceInfo> out{
      {.name = "cpu",
       .description =
           fmt::format("CPU, {} kernels, {} thread(s), host memory", cpu::isa_name(isa), threads),
       .host_memory = true}};
  for (backend::DeviceInfo& d : backend::Registry::global().devices()) out.push_back(std::move(d));
  return out;
}

Result<Numerics> parse_numerics(std::string_view text) {
  if (text == "default") return Numerics::kDefault;
  if (text == "llamacpp") return Numerics::kLlamaCpp;
  if (text == "llamacpp-norepack") return Numerics::kLlamaCppNoRepack;
  if (text == "llamacpp-avx512fp16") return Numerics::kLlamaCppAvx512Fp16;
  return make_error(
      fmt::format("unknown numerics '{}' (expected default, llamacpp, llamacpp-norepack or "
                  "llamacpp-avx512fp16)",
                  text));
}

Status Context::init(const EngineOptions& options) {
  Context* e = this;
  model_ = &loaded_->model();
  e->options_ = options;
  e->n_threads_ = options.n_threads > 0
                      ? options.n_threads
                      : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  // MINFER_CPU_ISA pins the kernel set (A/B checks of SIMD kernels on real models);
  // asking for an ISA this CPU lacks is an error, never a silent downgrade.
  backend::cpu::CpuIsa isa = backend::cpu::CpuIsa::kAuto;
  if (const std::string& name = Config::get().cpu_isa; !name.empty()) {
    auto parsed = backend::cpu::isa_from_name(name);
    if (!parsed) return parsed.error().context("MINFER_CPU_ISA");
    isa = *parsed;
  }
  // Under llamacpp numerics the llama.cpp build followed has AVX-512 vector code where the
  // CPU has AVX-512 and MINFER_CPU_ISA does not pin avx2; else it is an AVX2-only build.
  bool llamacpp_avx2_build = false;
  if (llamacpp_family(options.numerics)) {
    llamacpp_avx2_build = options.numerics != Numerics::kLlamaCppAvx512Fp16 &&
                          (isa == backend::cpu::CpuIsa::kAvx2 ||
                           backend::cpu::detect_isa() != backend::cpu::CpuIsa::kAvx512);
    // ggml's x86 quant dots accumulate 8 f32 lanes per block in order: our AVX2 kernels
    // follow it; the AVX-512 ones re-block (faster, other rounding) and the scalar
    // reference sums per block.
    if (isa == backend::cpu::CpuIsa::kAuto) isa = backend::cpu::CpuIsa::kAvx2;
    if (isa != backend::cpu::CpuIsa::kAvx2) {
      return make_error(
          "--numerics llamacpp needs the AVX2 kernels (MINFER_CPU_ISA must be "
          "unset or avx2)");
    }
    if (options.kv_format.k == graph::KvFormat::kF32 ||
        options.kv_format.v == graph::KvFormat::kF32) {
      return make_error(
          fmt::format("--numerics llamacpp needs an f16, q8_0 or q4_0 KV cache (cache type is {})",
                      graph::kv_formats_name(options.kv_format)));
    }
  }
  {  // the KV format / attention numerics pair is checked once, before any context
    graph::GraphParams probe = e->params_for(1, 1);
    probe.cparams.n_ctx = 1;
    MINFER_TRY_STATUS(e->model_->check_params(probe));
  }
  MINFER_TRY(auto cpu,
             backend::cpu::CpuBackend::create(
                 {.n_threads = e->n_threads_,
                  .isa = isa,
                  .dump_dir = Config::get().graph_dump,
                  .llamacpp_numerics = llamacpp_family(options.numerics),
                  .llamacpp_repack = options.numerics != Numerics::kLlamaCppNoRepack,
                  .llamacpp_fa_f16_arith = options.numerics == Numerics::kLlamaCppAvx512Fp16,
                  .llamacpp_avx2_build = llamacpp_avx2_build}));
  const graph::BackendId cpu_id = cpu->id();
  e->sched_.add_backend(std::move(cpu));
  // The other devices, from the registry, in the order named; ids follow the CPU's.
  std::vector<std::string_view> named;
  for (const std::string& name : options.devices) {
    if (std::find(named.begin(), named.end(), name) != named.end()) {
      return make_error(fmt::format("--device {}: named twice", name));
    }
    named.push_back(name);
    if (name == "cpu") continue;
    const auto id = static_cast<graph::BackendId>(cpu_id + static_cast<int>(named.size()));
    MINFER_TRY(std::unique_ptr<backend::Backend> b, backend::Registry::global().create(name, id));
    e->sched_.add_backend(std::move(b));
  }
  // -ngl: the first named device takes the last N layers (and the head past n_layer).
  if (options.n_gpu_layers != 0 && sched_.n_backends() > 1) {
    const auto n_layer = static_cast<int32_t>(model_->hparams().n_layer);
    const bool all = options.n_gpu_layers < 0 || options.n_gpu_layers > n_layer;
    placement_ = {.device = sched_.backend_at(1)->id(),  // registration order: CPU first
                  .n_layers = all ? n_layer : options.n_gpu_layers,
                  .head = all};
  }
  MINFER_TRY_STATUS(upload_weights());
  if (options.graph_trace) {
    Context* self = this;
    e->sched_.set_trace_hook([self](const sched::ExecTrace& t) {
      const graph::ComputeGraph& g = self->cache_->current();
      std::string text = sched::format_trace(t, g, [self](graph::BackendId id) {
        backend::Backend* b = self->sched_.backend(id);
        return b != nullptr ? b->name() : std::string_view("?");
      });
      log_info("[graph] execute {}{}: {}", t.execute_index, t.planned_now ? " (planned)" : "",
               text);
    });
  }
  return Ok{};
}

Context::~Context() = default;

Status Context::upload_weights() {
  if (placement_.n_layers == 0 && !placement_.head) return Ok{};
  // Which weights each non-CPU backend's nodes read: found on the decode graph as the
  // runtime places it (placement does not depend on the row counts or n_ctx).
  graph::GraphParams probe = params_for(1, 1);
  probe.cparams.n_ctx = 1;
  graph::ComputeGraph g = model_->build_graph(probe);
  graph::place_layers(g, probe.cparams.placement);
  MINFER_TRY_STATUS(sched_.assign_backends(g));
  graph::run_fusion(g, probe.cparams.fusion, sched_.fusion_support());
  std::vector<std::pair<std::string, graph::BackendId>> wanted;
  for (const graph::Node& n : g.nodes()) {
    if (n.is_leaf() || n.backend == graph::kBackendCpu) continue;
    for (int k = 0; k < n.n_src; ++k) {
      const graph::Node& src = g.node(n.src[k]);
      if (src.op != graph::Op::kWeight) continue;
      std::pair<std::string, graph::BackendId> key{src.name, n.backend};
      if (std::find(wanted.begin(), wanted.end(), key) == wanted.end()) wanted.push_back(key);
    }
  }
  std::unordered_map<std::string, std::pair<const void*, uint64_t>> host;
  model_->weights().for_each([&](const model::WeightRef& w) { host[w.name] = {w.data, w.bytes}; });
  auto aligned = [](uint64_t b) {
    return (b + alloc::kTensorAlignment - 1) / alloc::kTensorAlignment * alloc::kTensorAlignment;
  };
  std::vector<graph::BackendId> devices;
  for (const auto& [name, b] : wanted) {
    if (std::find(devices.begin(), devices.end(), b) == devices.end()) devices.push_back(b);
  }
  for (graph::BackendId b : devices) {
    uint64_t total = 0;
    for (const auto& [name, wb] : wanted) {
      if (wb != b) continue;
      auto it = host.find(name);
      if (it == host.end()) return make_error(fmt::format("weight '{}' is not in the model", name));
      total += aligned(it->second.second);
    }
    backend::Backend* dev = sched_.backend(b);
    MINFER_TRY(alloc::Buffer buf, alloc::Buffer::allocate(*sched_.memory(b), total));
    uint64_t at = 0;
    for (const auto& [name, wb] : wanted) {
      if (wb != b) continue;
      const auto& [data, bytes] = host.at(name);
      MINFER_TRY_STATUS(dev->set(buf.data() + at, data, bytes));
      device_weights_.push_back(
          {.name = name, .backend = b, .data = buf.data() + at, .bytes = bytes});
      at += aligned(bytes);
    }
    MINFER_TRY_STATUS(dev->wait_fence(dev->record_fence()));
    weight_buffers_.push_back(std::move(buf));
  }
  return Ok{};
}

Status Context::set_n_ctx(uint32_t n_ctx) {
  if (n_ctx == 0) return make_error("n_ctx must be > 0");
  return set_context(
      {.n_cells = n_ctx, .n_seq_max = 1, .n_ctx_seq = n_ctx, .n_runs = 1, .pad_rows = false});
}

Status Context::set_context(const ContextOptions& options) {
  ContextOptions o = options;
  if (o.n_cells == 0) return make_error("n_ctx must be > 0");
  if (o.n_ctx_seq == 0) o.n_ctx_seq = o.n_cells;
  if (o.n_ctx_seq > model_->hparams().n_ctx_train) {
    return make_error(fmt::format("n_ctx {} exceeds the model's context length {}", o.n_ctx_seq,
                                  model_->hparams().n_ctx_train));
  }
  if (o.n_ctx_seq > o.n_cells) {
    return make_error(fmt::format("a sequence's context ({}) exceeds the KV arena ({} cells)",
                                  o.n_ctx_seq, o.n_cells));
  }
  if (o.n_seq_max == 0 || o.n_seq_max > kv::kMaxSeqs) {
    return make_error(
        fmt::format("{} sequences requested; a context holds 1..{}", o.n_seq_max, kv::kMaxSeqs));
  }
  if (o.n_runs < 1) return make_error(fmt::format("window runs {} < 1", o.n_runs));
  if (o.n_cells == n_ctx_ && o.n_seq_max == context_.n_seq_max && cache_ != nullptr) {
    context_ = o;
    clear_kv();
    return Ok{};
  }
  MINFER_TRY(kv::KvCells cells,
             kv::KvCells::create(
                 {.n_ctx = o.n_cells, .n_seq_max = o.n_seq_max, .format = options_.kv_format}));
  // Regions are sized once per n_ctx: a new context gets a fresh allocator (and so a
  // fresh cache), never a grown region.
  auto memory = std::make_unique<alloc::Allocator>();
  model_->weights().for_each(
      [&](const model::WeightRef& w) { memory->bind_weight(w.name, w.data, w.bytes); });
  // The other backends' memory, and the weights uploaded to them at load.
  for (size_t i = 0; i < sched_.n_backends(); ++i) {
    const graph::BackendId id = sched_.backend_at(i)->id();
    if (id != graph::kBackendCpu) memory->register_backend(id, sched_.memory(id));
  }
  for (const DeviceWeight& w : device_weights_) {
    memory->bind_weight(w.name, w.data, w.bytes, w.backend);
  }
  cache_ = std::make_unique<graph::GraphCache>(std::move(memory));
  // One runtime entry per graph: the scheduler's plan goes when the cache drops it.
  cache_->set_release_hook([this](uint64_t uid) { sched_.forget(uid); });
  kv_.emplace(std::move(cells));
  n_ctx_ = o.n_cells;
  context_ = o;
  return Ok{};
}

void Context::clear_kv() {
  if (kv_) kv_->clear();
}

const graph::CacheStats& Context::cache_stats() const {
  static const graph::CacheStats kEmpty{};
  return cache_ ? cache_->stats() : kEmpty;
}

alloc::Allocator* Context::allocator() {
  return cache_ ? &cache_->memory_as<alloc::Allocator>() : nullptr;
}

graph::GraphParams Context::params_for(uint32_t n_tokens, uint32_t n_out, int32_t n_runs) const {
  graph::GraphParams p;
  p.n_tokens = n_tokens;
  p.n_out = n_out;
  p.gtype = n_tokens == 1 ? graph::GraphType::kDecode : graph::GraphType::kPrefill;
  p.cparams.n_ctx = n_ctx_;
  p.cparams.window.n_runs = n_runs;  // one sequence filled from 0: one contiguous run
  p.cparams.kv_format = options_.kv_format;
  p.cparams.attn_numerics = llamacpp_family(options_.numerics) ? graph::AttnNumerics::kGgmlF16
                                                               : graph::AttnNumerics::kF32;
  // llama.cpp rotates a quantized cache's Q/K/V unless LLAMA_ATTN_ROT_DISABLE is set, and
  // so does every numerics mode here (it cuts a q4_0 cache's KL divergence ~3x);
  // MINFER_KV_ROTATION=0 is that switch.
  p.cparams.kv_rotation = Config::get().kv_rotation;
  p.cparams.placement = placement_;
  return p;
}

bool Context::kv_rotated() const {
  const model::KvRotation r = model::kv_rotation(hparams(), params_for(1, 1).cparams);
  return r.k > 0 || r.v > 0;
}

graph::ComputeGraph Context::build_runtime(const graph::GraphParams& params) const {
  graph::ComputeGraph g = model_->build_graph(params);
  graph::place_layers(g, params.cparams.placement);
  auto assigned = sched_.assign_backends(g);
  MINFER_CHECK(assigned.ok(), "%s", assigned.ok() ? "" : assigned.error().message.c_str());
  graph::run_fusion(g, params.cparams.fusion, sched_.fusion_support());
  return g;
}

Result<graph::ComputeGraph> Context::runtime_graph(uint32_t n_tokens, uint32_t n_out) const {
  if (n_ctx_ == 0) return make_error("runtime_graph: no context set (set_n_ctx first)");
  const graph::GraphParams p = params_for(n_tokens, n_out);
  MINFER_TRY_STATUS(model_->check_params(p));
  graph::ComputeGraph g = model_->build_graph(p);
  graph::place_layers(g, p.cparams.placement);
  MINFER_TRY_STATUS(sched_.assign_backends(g));
  graph::run_fusion(g, p.cparams.fusion, sched_.fusion_support());
  return g;
}

Status Context::rebuild(const graph::GraphParams& params) {
  MINFER_TRY_STATUS(model_->check_params(params));
  const auto t0 = Clock::now();
  graph::ComputeGraph g = model_->build_graph(params);
  const double build_ms = ms_since(t0);
  const auto t1 = Clock::now();
  graph::place_layers(g, params.cparams.placement);
  MINFER_TRY_STATUS(sched_.assign_backends(g));
  const graph::FusionStats fused =
      graph::run_fusion(g, params.cparams.fusion, sched_.fusion_support());
  const double assign_ms = ms_since(t1);
  const size_t n_nodes = g.size();
  const auto t2 = Clock::now();
  MINFER_TRY(const graph::ComputeGraph* cached, cache_->replace_graph(std::move(g), params));
  const double alloc_ms = ms_since(t2);
  stats_.rebuilds++;
  if (options_.rebuild_trace) {
    log_info(
        "rebuild uid {} ({}): {} nodes, {} fused; build {:.3f} ms, assign+fuse {:.3f} ms, "
        "alloc {:.3f} ms",
        cached->uid(), graph::to_string(params), n_nodes, fused.rms_norm_mul, build_ms, assign_ms,
        alloc_ms);
  }
  return Ok{};
}

Result<const graph::ComputeGraph*> Context::prepare(const graph::GraphParams& params) {
  MINFER_TRY(bool hit, cache_->try_reuse(params));
  if (hit) {
    stats_.reuses++;
  } else {
    MINFER_TRY_STATUS(rebuild(params));
  }
  return &cache_->current();
}

}  // namespace minfer::engine

namespace minfer::engine {

// Session KV records: per position, layer 0 K, layer 0 V, layer 1 K, ... The regions
// are addressed by cell (ARCHITECTURE §2.3), so export looks each position's cell up
// and import places positions first, then writes the cells it was given.
uint64_t Context::kv_token_bytes() const {
  if (cache_ == nullptr) return 0;
  const auto& memory = cache_->memory_as<alloc::Allocator>();
  uint64_t bytes = 0;
  for (uint32_t il = 0; il < model_->hparams().n_layer; ++il) {
    for (graph::KvKind kind : {graph::KvKind::kK, graph::KvKind::kV}) {
      const alloc::RegionInfo* r = memory.region(static_cast<int32_t>(il), kind);
      if (r == nullptr) return 0;
      bytes += r->row_bytes;
    }
  }
  return bytes;
}

Result<std::vector<std::byte>> Context::kv_export(uint32_t n_tokens) const {
  return kv_export_seq(0, n_tokens);
}

Result<std::vector<std::byte>> Context::kv_export_seq(kv::SeqId seq, uint32_t n_tokens) const {
  if (cache_ == nullptr) return make_error("kv_export: no context set");
  const uint32_t limit = context_.n_ctx_seq > 0 ? context_.n_ctx_seq : n_ctx_;
  if (n_tokens > limit) {
    return make_error(fmt::format("kv_export: {} positions, n_ctx {}", n_tokens, limit));
  }
  const uint64_t rec = kv_token_bytes();
  if (rec == 0 && n_tokens > 0) return make_error("kv_export: no KV region exists yet");
  const auto& memory = cache_->memory_as<alloc::Allocator>();
  std::vector<std::byte> out(rec * n_tokens);
  std::byte* dst = out.data();
  for (uint32_t p = 0; p < n_tokens; ++p) {
    const auto cell = kv_->find(seq, static_cast<kv::Pos>(p));
    if (!cell) {
      return make_error(fmt::format("kv_export: no cell holds position {} of sequence {}", p, seq));
    }
    for (uint32_t il = 0; il < model_->hparams().n_layer; ++il) {
      for (graph::KvKind kind : {graph::KvKind::kK, graph::KvKind::kV}) {
        const uint64_t n = memory.region(static_cast<int32_t>(il), kind)->row_bytes;
        MINFER_TRY_STATUS(
            memory.read_cell(static_cast<int32_t>(il), kind, *cell, std::span<std::byte>(dst, n)));
        dst += n;
      }
    }
  }
  return out;
}

Status Context::kv_import(uint32_t n_tokens, std::span<const std::byte> data) {
  return import_rows(0, n_tokens, data, /*free_all=*/true);
}

Status Context::kv_import_seq(kv::SeqId seq, uint32_t n_tokens, std::span<const std::byte> data) {
  return import_rows(seq, n_tokens, data, /*free_all=*/false);
}

Status Context::import_rows(kv::SeqId seq, uint32_t n_tokens, std::span<const std::byte> data,
                            bool free_all) {
  if (cache_ == nullptr) return make_error("kv_import: no context set");
  const uint32_t limit = context_.n_ctx_seq > 0 ? context_.n_ctx_seq : n_ctx_;
  if (n_tokens > limit) {
    return make_error(fmt::format("kv_import: {} positions, n_ctx {}", n_tokens, limit));
  }
  auto& memory = cache_->memory_as<alloc::Allocator>();
  if (memory.n_regions() == 0) {
    // Regions come into being when a graph is first mapped: build the decode graph
    // (the next turn needs it anyway) without running it.
    MINFER_TRY_STATUS(rebuild(params_for(1, 1)));
  }
  const uint64_t rec = kv_token_bytes();
  if (data.size() != rec * n_tokens) {
    return make_error(fmt::format("kv_import: {} bytes for {} positions of {} bytes", data.size(),
                                  n_tokens, rec));
  }
  // Checked above: nothing is freed for an import that cannot happen.
  if (free_all) {
    kv_->clear();
  } else {
    kv_->seq_rm(seq, -1, -1);
  }
  if (n_tokens == 0) return Ok{};
  std::vector<kv::KvToken> batch(n_tokens);
  for (uint32_t p = 0; p < n_tokens; ++p) {
    batch[p] = {.seq = seq, .pos = static_cast<kv::Pos>(p)};
  }
  MINFER_TRY(std::vector<int32_t> cells, kv_->place(batch));
  const std::byte* src = data.data();
  for (uint32_t p = 0; p < n_tokens; ++p) {
    for (uint32_t il = 0; il < model_->hparams().n_layer; ++il) {
      for (graph::KvKind kind : {graph::KvKind::kK, graph::KvKind::kV}) {
        const uint64_t n = memory.region(static_cast<int32_t>(il), kind)->row_bytes;
        MINFER_TRY_STATUS(memory.write_cell(static_cast<int32_t>(il), kind, cells[p],
                                            std::span<const std::byte>(src, n)));
        src += n;
      }
    }
  }
  return Ok{};
}

}  // namespace minfer::engine
