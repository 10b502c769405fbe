// Tool (fixtures): `minfer-model-fixture --arch qwen2|llama|qwen3|gemma3|phi3|qwen3moe --preset
// NAME --type TYPE
// --vocab VOCAB.gguf [--seed N] -o OUT.gguf` writes a model GGUF with deterministic
// pseudo-random weights (random.h) and the vocabulary metadata of VOCAB.gguf, with
// the tensor names, metadata keys and per-tensor types llama.cpp uses (model_spec.h).
// Invariant: the output bytes are a pure function of the arguments and the vocabulary
// file (not of the thread count or the machine); tests/golden checks a hash.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "model_spec.h"
#include "quant/quant.h"
#include "random.h"

namespace {

using minfer::DType;
using minfer::gguf::Value;
namespace fx = minfer::fixture;

int fail(const std::string& msg) {
  fmt::print(stderr, "minfer-model-fixture: {}\n", msg);
  return 1;
}

// Rows [r0, r1) of one tensor: generate F32 values, convert to the tensor's type.
// Rows are independent (no quant block crosses a row), so any split gives the same
// bytes.
minfer::Status fill_rows(const fx::TensorPlan& t, uint64_t stream, uint64_t r0, uint64_t r1,
                         uint64_t row_bytes, std::vector<uint8_t>& out) {
  const uint64_t ne0 = t.dims[0];
  std::vector<float> row(ne0);
  for (uint64_t r = r0; r < r1; ++r) {
    fx::fill_normal(stream, r * ne0, t.mean, t.std, row);
    MINFER_TRY_STATUS(
        minfer::quant::quantize(t.type, row, std::span(out.data() + r * row_bytes, row_bytes)));
  }
  return minfer::Ok{};
}

minfer::Result<std::vector<uint8_t>> tensor_bytes(const fx::TensorPlan& t, uint64_t seed,
                                                  unsigned n_threads) {
  MINFER_TRY(const uint64_t row_bytes, minfer::quant::row_bytes(t.type, t.dims[0]));
  uint64_t n_rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) n_rows *= t.dims[d];
  std::vector<uint8_t> out(row_bytes * n_rows);
  const uint64_t stream = fx::tensor_stream(seed, t.name);
  const uint64_t n_parts = std::min<uint64_t>(n_threads, n_rows);
  std::vector<minfer::Status> status(n_parts, minfer::Ok{});
  std::vector<std::thread> workers;
  for (uint64_t p = 0; p < n_parts; ++p) {
    const uint64_t r0 = n_rows * p / n_parts, r1 = n_rows * (p + 1) / n_parts;
    workers.emplace_back(
        [&, p, r0, r1] { status[p] = fill_rows(t, stream, r0, r1, row_bytes, out); });
  }
  for (auto& w : workers) w.join();
  for (auto& s : status) {
    if (!s.ok()) return s.error();
  }
  return out;
}

void set_hparams(minfer::gguf::Writer& w, const fx::Shape& s, const fx::FtypeInfo& ft,
                 const std::string& name, uint64_t seed) {
  const std::string a(fx::arch_name(s.arch));
  auto u32 = [](uint64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", Value::string(a));
  w.set("general.type", Value::string("model"));
  w.set("general.name", Value::string(name));
  w.set("general.description",
        Value::string(
            fmt::format("random weights written by minfer-model-fixture (generator v{}, seed {}); "
                        "not a trained model",
                        fx::kGeneratorVersion, seed)));
  w.set(a + ".block_count", u32(s.n_layer));
  w.set(a + ".context_length", u32(s.n_ctx_train));
  w.set(a + ".embedding_length", u32(s.n_embd));
  w.set(a + ".feed_forward_length", u32(s.n_ff));
  w.set(a + ".attention.head_count", u32(s.n_head));
  w.set(a + ".attention.head_count_kv", u32(s.n_head_kv));
  w.set(a + ".rope.freq_base", Value::f32(static_cast<float>(s.rope_freq_base)));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(static_cast<float>(s.rms_eps)));
  if (s.sliding_window > 0) {  // conversion/gemma.py Gemma3Model
    w.set(a + ".attention.sliding_window", u32(s.sliding_window));
  }
  if (s.n_embd_head * s.n_head != s.n_embd || s.arch == fx::Arch::kGemma3) {
    // convert_hf_to_gguf.py writes these only when config.json has head_dim.
    w.set(a + ".attention.key_length", u32(s.n_embd_head));
    w.set(a + ".attention.value_length", u32(s.n_embd_head));
  }
  w.set("general.file_type", u32(ft.llama_ftype));
  if (s.arch == fx::Arch::kPhi3) {  // conversion Phi3MiniModel: rope dims, original context
    w.set(a + ".rope.dimension_count", u32(s.n_embd_head));
  }
  if (s.n_expert > 0) {  // convert_hf_to_gguf.py Qwen3MoeModel (Qwen2MoeModel)
    w.set(a + ".expert_count", u32(s.n_expert));
    w.set(a + ".expert_used_count", u32(s.n_expert_used));
    w.set(a + ".expert_feed_forward_length", u32(s.n_ff_exp));
  }
  if (s.arch == fx::Arch::kLlama) {  // conversion/llama.py LlamaModel.set_gguf_parameters
    w.set(a + ".vocab_size", u32(s.n_vocab));
    w.set(a + ".rope.dimension_count", u32(s.n_embd_head));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a model GGUF with deterministic random weights", "minfer-model-fixture"};
  std::string arch_s = "qwen2", preset_s = "tiny", type_s = "f32", vocab_path, out_path, name;
  uint64_t seed = 42;
  unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  bool print_plan = false;
  std::optional<uint64_t> n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
  std::optional<double> rope_base, rms_eps;
  std::optional<bool> tied, qkv_bias;
  app.add_option("--arch", arch_s, "qwen2 | llama | qwen3 | gemma3 | phi3 | qwen3moe")
      ->capture_default_str();
  app.add_option("--preset", preset_s,
                 "tiny | llama-0.1b | qwen2.5-0.5b | qwen3-0.6b | qwen3moe-0.5b")
      ->capture_default_str();
  app.add_option("--type", type_s,
                 "f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k_s q4_k_m q5_k_m q6_k")
      ->capture_default_str();
  app.add_option("--vocab", vocab_path, "GGUF whose tokenizer.* metadata is copied")->required();
  app.add_option("-o,--output", out_path, "GGUF file to write");
  app.add_option("--seed", seed, "generator seed")->capture_default_str();
  app.add_option("--name", name, "general.name (default: from arch, preset and type)");
  app.add_option("--threads", n_threads, "worker threads (the output does not depend on it)");
  app.add_option("--n-embd", n_embd);
  app.add_option("--n-layer", n_layer);
  app.add_option("--n-head", n_head);
  app.add_option("--n-head-kv", n_head_kv);
  app.add_option("--head-dim", head_dim);
  app.add_option("--n-ff", n_ff);
  app.add_option("--n-ctx-train", n_ctx);
  app.add_option("--rope-base", rope_base);
  app.add_option("--rms-eps", rms_eps);
  app.add_option("--tied", tied, "tied embeddings (true/false)");
  app.add_option("--qkv-bias", qkv_bias, "attn_{q,k,v}.bias (true/false)");
  app.add_flag("--print-plan", print_plan,
               "print the tensor list (name, type, dims, std) and exit");
  CLI11_PARSE(app, argc, argv);

  const auto arch = fx::arch_from_name(arch_s);
  if (!arch)
    return fail("unknown --arch '" + arch_s + "' (qwen2, llama, qwen3, gemma3, phi3, qwen3moe)");
  auto shape = fx::preset(preset_s, *arch);
  if (!shape) {
    return fail("unknown --preset '" + preset_s + "' for --arch " + arch_s +
                " (tiny, qwen2.5-0.5b, qwen3-0.6b (qwen3 only), qwen3moe-0.5b (qwen3moe only))");
  }
  const auto ft = fx::ftype_from_name(type_s);
  if (!ft) return fail("unknown --type '" + type_s + "'");
  fx::Shape& s = *shape;
  if (n_embd) s.n_embd = *n_embd;
  if (n_layer) s.n_layer = *n_layer;
  if (n_head) s.n_head = *n_head;
  if (n_head_kv) s.n_head_kv = *n_head_kv;
  if (head_dim) s.n_embd_head = *head_dim;
  if (n_ff) s.n_ff = *n_ff;
  if (n_ctx) s.n_ctx_train = *n_ctx;
  if (rope_base) s.rope_freq_base = *rope_base;
  if (rms_eps) s.rms_eps = *rms_eps;
  if (tied) s.tied_embeddings = *tied;
  if (qkv_bias) s.qkv_bias = *qkv_bias;

  auto vocab = minfer::gguf::Model::open(vocab_path);
  if (!vocab) return fail(vocab.error().message);
  auto tokens = vocab->get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return fail(vocab_path + ": " + tokens.error().message);
  s.n_vocab = tokens->size();
  if (auto p = fx::shape_problem(s); !p.empty()) return fail(p);
  if (name.empty()) name = fmt::format("minfer fixture {} {} {}", arch_s, preset_s, type_s);

  const auto plan = fx::plan_tensors(s, ft->ftype);
  if (print_plan) {
    for (const auto& t : plan) {
      std::string dims;
      for (auto d : t.dims) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
      fmt::print("{:<28} {:<5} [{}] mean {} std {:.6g}\n", t.name, minfer::dtype_name(t.type), dims,
                 t.mean, t.std);
    }
    return 0;
  }
  if (out_path.empty()) return fail("-o/--output is required");

  minfer::gguf::Writer w;
  set_hparams(w, s, *ft, name, seed);
  for (const auto& kv : vocab->metadata()) {
    if (kv.key.starts_with("tokenizer.")) w.set(kv.key, kv.value);
  }
  w.set("general.quantization_version", Value::u32(2));  // GGML_QNT_VERSION

  for (const auto& t : plan) {
    auto bytes = tensor_bytes(t, seed, n_threads);
    if (!bytes) return fail(t.name + ": " + bytes.error().message);
    auto st = w.add_tensor(t.name, t.type, t.dims, *bytes);
    if (!st) return fail(t.name + ": " + st.error().message);
  }
  auto st = w.write(out_path);
  if (!st) return fail(st.error().message);
  return 0;
}
