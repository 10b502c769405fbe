// Tests (model, engine): tiny Llama-family GGUF models with seeded random weights,
// written by our own GGUF writer so unit tests stay fast and hermetic. Optionally
// carries a real vocabulary (tokenizer.* keys copied from a tests/data/vocab GGUF).
// Faults can be injected (a dropped tensor, a wrong shape, extra metadata) to test
// the loader's errors.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "quant/quant.h"

namespace minfer::testing {

struct TinySpec {
  std::string arch = "llama";  // general.architecture
  int64_t n_vocab = 96;        // ignored when vocab_gguf is given
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 128;
  uint32_t n_ctx_train = 512;
  float rope_base = 10000.0f;
  DType wtype = DType::kQ8_0;  // 2-D weights; norms and biases are F32
  bool tied = true;            // no output.weight
  bool qkv_bias = false;       // attn_{q,k,v}.bias (qwen2)
  // gemma3: <arch>.attention.sliding_window (with a pattern period of 2, so layer 0
  // slides and layer 1 is global); qwen3 and gemma3 also get their QK-norm tensors and
  // gemma3 its post-norms.
  uint32_t n_swa = 16;
  // qwen3moe: a mixture of n_expert SwiGLU experts of width n_ff_exp per block, n_expert_used
  // of them per token (F32 router ffn_gate_inp, 3-D ffn_{gate,up,down}_exps), and qwen3's
  // QK-norm. phi3: fused attn_qkv (Q | K | V rows) and ffn_up (gate | up rows).
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t n_ff_exp = 64;
  std::string vocab_gguf;  // copy tokenizer.* metadata from here ("" = none)
  uint32_t seed = 1;
  std::string drop_tensor;       // fault: leave this tensor out
  std::string bad_shape_tensor;  // fault: give this tensor one extra row
  std::vector<std::pair<std::string, gguf::Value>> extra_kv;  // fault / extra keys
  std::vector<std::string> drop_kv;                           // fault: keys left out
};

inline std::string vocab_path(const std::string& name) {
  return std::string(MINFER_TESTDATA_DIR) + "/vocab/" + name;
}

// A file name under the system temp dir, removed by the destructor.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& stem) {
    path = ::testing::TempDir() + stem + "-" + std::to_string(::getpid()) + ".gguf";
  }
  ~TempFile() { std::remove(path.c_str()); }
};

inline std::vector<uint8_t> tensor_data(DType type, const std::vector<uint64_t>& dims,
                                        std::mt19937& rng, float mean, float stddev) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = mean + stddev * dist(rng);
  auto bytes = quant::row_bytes(type, n);
  EXPECT_TRUE(bytes.ok());
  std::vector<uint8_t> out(bytes.ok() ? *bytes : 0);
  if (type == DType::kF32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    EXPECT_TRUE(quant::quantize(type, v, out).ok());
  }
  return out;
}

inline Status write_tiny_model(const std::string& path, const TinySpec& s) {
  gguf::Writer w;
  int64_t n_vocab = s.n_vocab;
  if (!s.vocab_gguf.empty()) {
    MINFER_TRY(gguf::Model vocab, gguf::Model::open(s.vocab_gguf));
    for (const gguf::KeyValue& kv : vocab.metadata()) {
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    }
    MINFER_TRY(auto toks, vocab.get_string_array("tokenizer.ggml.tokens"));
    n_vocab = static_cast<int64_t>(toks.size());
  }
  const std::string& a = s.arch;
  std::vector<std::pair<std::string, gguf::Value>> kvs = {
      {"general.architecture", gguf::Value::string(a)},
      {"general.name", gguf::Value::string("tiny-" + a)},
      {a + ".block_count", gguf::Value::u32(static_cast<uint32_t>(s.n_layer))},
      {a + ".context_length", gguf::Value::u32(s.n_ctx_train)},
      {a + ".embedding_length", gguf::Value::u32(static_cast<uint32_t>(s.n_embd))},
      {a + ".feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(s.n_ff))},
      {a + ".attention.head_count", gguf::Value::u32(static_cast<uint32_t>(s.n_head))},
      {a + ".attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(s.n_head_kv))},
      {a + ".rope.freq_base", gguf::Value::f32(s.rope_base)},
      {a + ".attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f)},
  };
  const bool moe = a == "qwen3moe";
  const bool fused = a == "phi3";
  const bool qk_norm = a == "qwen3" || a == "gemma3" || moe;
  const bool gemma = a == "gemma3";
  if (moe) {
    kvs.emplace_back(a + ".expert_count", gguf::Value::u32(static_cast<uint32_t>(s.n_expert)));
    kvs.emplace_back(a + ".expert_used_count",
                     gguf::Value::u32(static_cast<uint32_t>(s.n_expert_used)));
    kvs.emplace_back(a + ".expert_feed_forward_length",
                     gguf::Value::u32(static_cast<uint32_t>(s.n_ff_exp)));
  }
  if (gemma) {
    kvs.emplace_back(a + ".attention.sliding_window", gguf::Value::u32(s.n_swa));
    kvs.emplace_back(a + ".attention.sliding_window_pattern", gguf::Value::u32(2));
  }
  for (auto& [k, v] : kvs) {
    bool dropped = false;
    for (const std::string& d : s.drop_kv) dropped |= d == k;
    if (!dropped) w.set(k, v);
  }
  for (const auto& [k, v] : s.extra_kv) w.set(k, v);

  std::mt19937 rng(s.seed);
  const uint64_t hd = static_cast<uint64_t>(s.n_embd / s.n_head);
  const uint64_t ne = static_cast<uint64_t>(s.n_embd), nkv = hd * s.n_head_kv;
  const uint64_t nff = static_cast<uint64_t>(s.n_ff), nv = static_cast<uint64_t>(n_vocab);
  const float wstd = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  auto add = [&](const std::string& name, DType type, std::vector<uint64_t> dims, float mean,
                 float stddev) -> Status {
    if (name == s.drop_tensor) return Ok{};
    if (name == s.bad_shape_tensor) dims.back() += 1;
    std::vector<uint8_t> data = tensor_data(type, dims, rng, mean, stddev);
    return w.add_tensor(name, type, dims, data);
  };
  MINFER_TRY_STATUS(add("token_embd.weight", s.wtype, {ne, nv}, 0.0f, 1.0f));
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    MINFER_TRY_STATUS(add(b + "attn_norm.weight", DType::kF32, {ne}, 1.0f, 0.1f));
    if (fused) {
      MINFER_TRY_STATUS(add(b + "attn_qkv.weight", s.wtype, {ne, ne + 2 * nkv}, 0.0f, wstd));
    } else {
      MINFER_TRY_STATUS(add(b + "attn_q.weight", s.wtype, {ne, ne}, 0.0f, wstd));
      MINFER_TRY_STATUS(add(b + "attn_k.weight", s.wtype, {ne, nkv}, 0.0f, wstd));
      MINFER_TRY_STATUS(add(b + "attn_v.weight", s.wtype, {ne, nkv}, 0.0f, wstd));
    }
    if (s.qkv_bias) {
      MINFER_TRY_STATUS(add(b + "attn_q.bias", DType::kF32, {ne}, 0.0f, 0.1f));
      MINFER_TRY_STATUS(add(b + "attn_k.bias", DType::kF32, {nkv}, 0.0f, 0.1f));
      MINFER_TRY_STATUS(add(b + "attn_v.bias", DType::kF32, {nkv}, 0.0f, 0.1f));
    }
    MINFER_TRY_STATUS(add(b + "attn_output.weight", s.wtype, {ne, ne}, 0.0f, wstd));
    if (qk_norm) {
      MINFER_TRY_STATUS(add(b + "attn_q_norm.weight", DType::kF32, {hd}, 1.0f, 0.1f));
      MINFER_TRY_STATUS(add(b + "attn_k_norm.weight", DType::kF32, {hd}, 1.0f, 0.1f));
    }
    if (gemma) {
      MINFER_TRY_STATUS(add(b + "post_attention_norm.weight", DType::kF32, {ne}, 1.0f, 0.1f));
      MINFER_TRY_STATUS(add(b + "post_ffw_norm.weight", DType::kF32, {ne}, 1.0f, 0.1f));
    }
    MINFER_TRY_STATUS(add(b + "ffn_norm.weight", DType::kF32, {ne}, 1.0f, 0.1f));
    if (moe) {
      const auto nx = static_cast<uint64_t>(s.n_expert);
      const auto nfe = static_cast<uint64_t>(s.n_ff_exp);
      // Router logits of std ~3, so top-k choices are rarely near ties.
      MINFER_TRY_STATUS(add(b + "ffn_gate_inp.weight", DType::kF32, {ne, nx}, 0.0f, 3.0f * wstd));
      MINFER_TRY_STATUS(add(b + "ffn_gate_exps.weight", s.wtype, {ne, nfe, nx}, 0.0f, wstd));
      MINFER_TRY_STATUS(add(b + "ffn_up_exps.weight", s.wtype, {ne, nfe, nx}, 0.0f, wstd));
      MINFER_TRY_STATUS(add(b + "ffn_down_exps.weight", s.wtype, {nfe, ne, nx}, 0.0f,
                            1.0f / std::sqrt(static_cast<float>(s.n_ff_exp))));
      continue;
    }
    if (!fused) MINFER_TRY_STATUS(add(b + "ffn_gate.weight", s.wtype, {ne, nff}, 0.0f, wstd));
    MINFER_TRY_STATUS(add(b + "ffn_up.weight", s.wtype, {ne, fused ? 2 * nff : nff}, 0.0f, wstd));
    MINFER_TRY_STATUS(add(b + "ffn_down.weight", s.wtype, {nff, ne}, 0.0f,
                          1.0f / std::sqrt(static_cast<float>(s.n_ff))));
  }
  MINFER_TRY_STATUS(add("output_norm.weight", DType::kF32, {ne}, 1.0f, 0.1f));
  if (!s.tied) MINFER_TRY_STATUS(add("output.weight", s.wtype, {ne, nv}, 0.0f, wstd));
  return w.write(path);
}

}  // namespace minfer::testing
