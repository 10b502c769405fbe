// Stage 18 (CLI): `minfer info MODEL [--json]` — architecture, metadata, tensor table,
// totals. Reads only the GGUF header (no inference); the JSON form is what tests
// compare with the Python `gguf` package.
#include <fmt/core.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "files.h"
#include "gguf/gguf.h"
#include "gguf/json.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

using json = nlohmann::ordered_json;

std::string type_label(const gguf::Value& v) {
  if (v.type != gguf::ValueType::kArray) return std::string(gguf::value_type_name(v.type));
  return fmt::format("arr[{},{}]", gguf::value_type_name(v.array.type()), v.array.size());
}

std::string shape_str(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

int run_info(const std::vector<std::string>& args) {
  ArgParser p("minfer info [MODEL] [--json]");
  std::string model_arg;
  bool as_json = false;
  p.string_opt("-m,--model", "PATH", "GGUF file (default: the default model)", model_arg);
  p.flag("--json", "machine-readable output (full metadata arrays)", [&] { as_json = true; });
  if (auto done = parse_model_command(p, args, "info", model_arg)) return *done;
  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  if (!model_arg.empty()) {
    if (auto st = check_model_file(*path); !st.ok()) return fail(st.error().message);
  }
  auto model = gguf::Model::open(*path);
  if (!model) return fail(model.error().message);

  const gguf::File& f = model->primary();
  uint64_t n_params = 0, n_bytes = 0;
  for (const auto& t : model->tensors()) {
    n_params += t.n_elements;
    n_bytes += t.n_bytes;
  }
  std::string arch;
  if (auto a = model->get_string("general.architecture")) arch = *a;

  if (as_json) {
    json j;
    j["path"] = *path;
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["parts"] = model->files().size();
    j["architecture"] = arch;
    json meta = json::object();
    for (const auto& kv : model->metadata()) {
      meta[kv.key] = {{"type", type_label(kv.value)},
                      {"value", gguf::value_to_json<json>(kv.value)}};
    }
    j["metadata"] = meta;
    json tensors = json::array();
    for (const auto& t : model->tensors()) {
      tensors.push_back({{"name", t.name},
                         {"type", std::string(dtype_name(t.type))},
                         {"shape", t.dims},
                         {"n_elements", t.n_elements},
                         {"n_bytes", t.n_bytes},
                         {"offset", t.offset},
                         {"part", t.split_index}});
    }
    j["tensors"] = tensors;
    j["totals"] = {{"tensors", model->tensors().size()}, {"params", n_params}, {"bytes", n_bytes}};
    fmt::print("{}\n", j.dump(1, ' ', false, json::error_handler_t::replace));
    return 0;
  }

  fmt::print("model:        {}\n", *path);
  fmt::print("format:       GGUF v{}, alignment {}, {} part(s), {} metadata keys\n", f.version(),
             f.alignment(), model->files().size(), model->metadata().size());
  fmt::print("architecture: {}\n", arch.empty() ? "(none)" : arch);
  if (auto name = model->get_string("general.name")) fmt::print("name:         {}\n", *name);
  fmt::print("\nmetadata:\n");
  size_t kw = 0;
  for (const auto& kv : model->metadata()) kw = std::max(kw, kv.key.size());
  for (const auto& kv : model->metadata()) {
    fmt::print("  {:<{}}  {:<16}  {}\n", kv.key, kw, type_label(kv.value), kv.value.to_display());
  }
  fmt::print("\ntensors:\n");
  size_t nw = 4;
  for (const auto& t : model->tensors()) nw = std::max(nw, t.name.size());
  fmt::print("  {:<{}}  {:<6}  {:<22}  {:>12}\n", "name", nw, "type", "shape", "bytes");
  for (const auto& t : model->tensors()) {
    fmt::print("  {:<{}}  {:<6}  {:<22}  {:>12}\n", t.name, nw, dtype_name(t.type),
               shape_str(t.dims), t.n_bytes);
  }
  const double bpw =
      n_params ? 8.0 * static_cast<double>(n_bytes) / static_cast<double>(n_params) : 0.0;
  fmt::print(
      "\ntotals: {} tensors, {} parameters ({:.2f} M), {} bytes ({:.2f} MiB), {:.3f} bits/weight\n",
      model->tensors().size(), n_params, static_cast<double>(n_params) / 1e6, n_bytes,
      static_cast<double>(n_bytes) / (1024.0 * 1024.0), bpw);
  return 0;
}

}  // namespace minfer::cli
