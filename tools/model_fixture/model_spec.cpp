// Tools (fixtures): presets, tensor list and llama-quantize's per-tensor type rules.
#include "model_spec.h"

#include <cmath>
#include <string>

#include "quant/quant.h"

namespace minfer::fixture {

namespace {

// Scales of the random values. Linear weights get std 1/sqrt(fan_in) so each
// projection keeps unit-scale activations (every sub-layer adds O(1) to the residual,
// so attention and the FFN visibly shape the output instead of the embedding alone).
// The output matrix (or the tied embedding) gets kLogitGain/sqrt(n_embd): with an
// RMS-normalised input the logits then have std ≈ kLogitGain, so the top-1/top-2 gap
// of a greedy step is typically far above kernel rounding differences and greedy
// runs are not decided by near-ties.
constexpr double kLogitGain = 3.0;
constexpr double kNormJitter = 0.1;  // norm weights: 1 + 0.1·N(0,1)
constexpr double kBiasStd = 0.1;     // q/k/v biases
// Gemma 3's post-norms set each sub-layer's output RMS; its embedding enters scaled by
// sqrt(n_embd), i.e. at the logit scale kLogitGain. With unit post-norms the embedding
// of the last token would outweigh every sub-layer and a random model would only repeat
// its input; at 3 the blocks shape the output as in the other fixtures.
constexpr double kPostNormGain = 3.0;
// The router of a mixture of experts: std kRouterGain/sqrt(n_embd), so its logits have
// std ≈ kRouterGain. A wide spread keeps the gap between the last chosen expert and the
// next one typically far above rounding differences, so expert selection of a random
// model is not decided by near-ties (a flipped choice changes the FFN output by O(1)).
constexpr double kRouterGain = 4.0;

constexpr FtypeInfo kFtypes[] = {
    {Ftype::kF32, "f32", 0, DType::kF32},         {Ftype::kF16, "f16", 1, DType::kF16},
    {Ftype::kBF16, "bf16", 32, DType::kBF16},     {Ftype::kQ4_0, "q4_0", 2, DType::kQ4_0},
    {Ftype::kQ4_1, "q4_1", 3, DType::kQ4_1},      {Ftype::kQ5_0, "q5_0", 8, DType::kQ5_0},
    {Ftype::kQ5_1, "q5_1", 9, DType::kQ5_1},      {Ftype::kQ8_0, "q8_0", 7, DType::kQ8_0},
    {Ftype::kQ4_K_S, "q4_k_s", 14, DType::kQ4_K}, {Ftype::kQ4_K_M, "q4_k_m", 15, DType::kQ4_K},
    {Ftype::kQ5_K_M, "q5_k_m", 17, DType::kQ5_K}, {Ftype::kQ6_K, "q6_k", 18, DType::kQ6_K},
};

bool is_quantized(DType t) {
  return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16;
}

uint64_t block(DType t) {
  return dtype_info(t).block_size;
}

// llama-quant.cpp use_more_bits: the first and last eighth of the layers and every
// third layer in between get more bits in the _M mixes.
bool use_more_bits(int64_t i_layer, int64_t n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// Type of one tensor, as llama_tensor_get_type picks it for `ftype` (no imatrix,
// no overrides, quantize_output_tensor on). F32/F16/BF16 files are what
// convert_hf_to_gguf.py --outtype writes: every 2-D weight in that type.
DType choose_type(const TensorPlan& t, const Shape& s, const FtypeInfo& ft) {
  // tensor_allows_quantization: 2-D and 3-D "...weight" tensors that are not norms and
  // not the router (llama-quant.cpp keeps ffn_gate_inp in F32; so does
  // convert_hf_to_gguf.py for every --outtype).
  const bool is_weight = t.name.ends_with("weight") &&
                         t.name.find("_norm.weight") == std::string::npos &&
                         t.role != Role::kFfnGateInp;
  if (t.dims.size() < 2 || !is_weight) return DType::kF32;
  DType type = ft.base;
  if (!is_quantized(type)) return type;
  const uint64_t nx = t.dims[0];
  const auto n_layer = static_cast<int64_t>(s.n_layer);
  if (t.role == Role::kOutput || (t.role == Role::kTokenEmbd && s.tied_embeddings)) {
    // The output matrix (and a tied embedding) gets Q6_K unless the mix is Q8_0.
    if (nx % block(type) != 0) {
      type = DType::kQ8_0;
    } else if (type != DType::kQ8_0) {
      type = DType::kQ6_K;
    }
  } else if (t.role == Role::kAttnV) {
    if ((ft.ftype == Ftype::kQ4_K_M || ft.ftype == Ftype::kQ5_K_M) &&
        use_more_bits(t.layer, n_layer)) {
      type = DType::kQ6_K;
    } else if (ft.ftype == Ftype::kQ4_K_S && t.layer < 4) {
      type = DType::kQ5_K;
    }
  } else if (t.role == Role::kFfnDown || t.role == Role::kFfnDownExps) {
    // A mixture of experts' ffn_down_exps counts as its block's ffn_down (layer_info
    // reads the layer from the name; n_ffn_down is n_layer).
    if ((ft.ftype == Ftype::kQ4_K_M || ft.ftype == Ftype::kQ5_K_M) &&
        use_more_bits(t.layer, n_layer)) {
      type = DType::kQ6_K;
    } else if (ft.ftype == Ftype::kQ4_K_S && t.layer < n_layer / 8) {
      type = DType::kQ5_K;
    }
  }
  if ((t.role == Role::kAttnV || t.role == Role::kAttnK) && s.n_expert == 8) {
    type = DType::kQ8_0;  // llama-quant.cpp: "for the 8-expert model, bumping this to Q8_0"
  }
  if (t.role == Role::kAttnOut && s.n_expert == 8 &&
      (ft.ftype == Ftype::kQ4_K_S || ft.ftype == Ftype::kQ4_K_M)) {
    type = DType::kQ5_K;  // llama-quant.cpp ATTENTION_OUTPUT, 8 experts
  }
  return quant::tensor_type_fallback(type, nx);  // a row length the block does not divide
}

}  // namespace

std::optional<Arch> arch_from_name(std::string_view name) {
  if (name == "qwen2") return Arch::kQwen2;
  if (name == "llama") return Arch::kLlama;
  if (name == "qwen3") return Arch::kQwen3;
  if (name == "gemma3") return Arch::kGemma3;
  if (name == "phi3") return Arch::kPhi3;
  if (name == "qwen3moe") return Arch::kQwen3Moe;
  return std::nullopt;
}

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kLlama:
      return "llama";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kGemma3:
      return "gemma3";
    case Arch::kPhi3:
      return "phi3";
    case Arch::kQwen3Moe:
      return "qwen3moe";
  }
  return "?";
}

std::optional<Shape> preset(std::string_view name, Arch arch) {
  Shape s;
  s.arch = arch;
  const bool qwen = arch == Arch::kQwen2;
  const bool moe = arch == Arch::kQwen3Moe;
  const bool modern = arch == Arch::kQwen3 || arch == Arch::kGemma3 || moe;
  s.tied_embeddings = qwen || modern;
  s.qkv_bias = qwen;
  s.qk_norm = modern;
  s.gemma_norms = arch == Arch::kGemma3;
  s.fused = arch == Arch::kPhi3;
  s.rope_freq_base = qwen || modern ? 1e6 : 1e4;
  s.rms_eps = qwen || modern ? 1e-6 : 1e-5;
  if (name == "tiny") {
    s.n_embd = 256;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_embd_head = 64;
    s.n_ff = 512;
    s.n_ctx_train = 2048;
    if (arch == Arch::kGemma3) {
      s.n_layer = 6;  // layers 0-4 slide, layer 5 is global (llama.cpp's period 6)
      s.n_head_kv = 1;
      s.n_embd_head = 128;
      s.sliding_window = 32;
    }
    if (moe) {
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 128;
    }
    return s;
  }
  if (moe != (name == "qwen3moe-0.5b")) {
    return std::nullopt;  // the larger presets are dense or mixture-of-experts shapes
  }
  if (name == "qwen3moe-0.5b") {
    s.n_embd = 1024;
    s.n_layer = 12;
    s.n_head = 16;
    s.n_head_kv = 4;
    s.n_embd_head = 64;
    s.n_ff = 3072;
    s.n_ctx_train = 32768;
    s.n_expert = 16;
    s.n_expert_used = 2;
    s.n_ff_exp = 512;
    return s;
  }
  if (name == "qwen3-0.6b") {
    if (arch != Arch::kQwen3) return std::nullopt;
    s.n_embd = 1024;
    s.n_layer = 28;
    s.n_head = 16;
    s.n_head_kv = 8;
    s.n_embd_head = 128;
    s.n_ff = 3072;
    s.n_ctx_train = 40960;
    return s;
  }
  if (name == "llama-0.1b") {
    if (arch != Arch::kLlama) return std::nullopt;
    s.n_embd = 768;
    s.n_layer = 12;
    s.n_head = 12;
    s.n_head_kv = 4;
    s.n_embd_head = 64;
    s.n_ff = 2048;
    s.n_ctx_train = 2048;
    return s;
  }
  if (name == "qwen2.5-0.5b") {
    s.n_embd = 896;
    s.n_layer = 24;
    s.n_head = 14;
    s.n_head_kv = 2;
    s.n_embd_head = 64;
    s.n_ff = 4864;
    s.n_ctx_train = 32768;
    s.rope_freq_base = 1e6;
    s.rms_eps = 1e-6;
    s.tied_embeddings = true;
    s.qkv_bias = true;
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> preset_names() {
  return {"tiny", "llama-0.1b", "qwen2.5-0.5b", "qwen3-0.6b", "qwen3moe-0.5b"};
}

std::optional<FtypeInfo> ftype_from_name(std::string_view name) {
  for (const auto& f : kFtypes) {
    if (f.name == name) return f;
  }
  return std::nullopt;
}

const FtypeInfo& ftype_info(Ftype f) {
  for (const auto& i : kFtypes) {
    if (i.ftype == f) return i;
  }
  return kFtypes[0];
}

std::vector<std::string> ftype_names() {
  std::vector<std::string> out;
  for (const auto& f : kFtypes) out.emplace_back(f.name);
  return out;
}

std::string shape_problem(const Shape& s) {
  if (s.n_vocab == 0) return "n_vocab is 0 (the vocabulary has no tokens)";
  if (s.n_embd == 0 || s.n_layer == 0 || s.n_head == 0 || s.n_head_kv == 0 || s.n_embd_head == 0 ||
      s.n_ff == 0) {
    return "every dimension must be positive";
  }
  if (s.n_head % s.n_head_kv != 0) return "n_head must be a multiple of n_head_kv";
  if (s.n_embd_head % 2 != 0) return "the head dimension must be even (RoPE rotates pairs)";
  if (s.n_embd % 32 != 0 || s.n_ff % 32 != 0 || (s.n_head * s.n_embd_head) % 32 != 0) {
    return "n_embd, n_ff and n_head*head_dim must be multiples of 32 (quant block rows)";
  }
  if (s.n_expert > 0) {
    if (s.n_expert_used == 0 || s.n_expert_used > s.n_expert) {
      return "expert_used_count must be in 1..expert_count";
    }
    if (s.n_ff_exp == 0 || s.n_ff_exp % 32 != 0) {
      return "the expert width must be a positive multiple of 32 (quant block rows)";
    }
  }
  return "";
}

std::vector<TensorPlan> plan_tensors(const Shape& s, Ftype ftype) {
  const uint64_t n_q = s.n_head * s.n_embd_head;      // rows of attn_q
  const uint64_t n_kv = s.n_head_kv * s.n_embd_head;  // rows of attn_k / attn_v
  const double logit_std = kLogitGain / std::sqrt(static_cast<double>(s.n_embd));
  auto lin = [](uint64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); };

  std::vector<TensorPlan> out;
  auto add = [&](std::string name, Role role, int layer, std::vector<uint64_t> dims, double mean,
                 double std) {
    out.push_back(TensorPlan{.name = std::move(name),
                             .role = role,
                             .layer = layer,
                             .dims = std::move(dims),
                             .mean = mean,
                             .std = std});
  };
  add("token_embd.weight", Role::kTokenEmbd, -1, {s.n_embd, s.n_vocab}, 0, logit_std);
  for (uint64_t il = 0; il < s.n_layer; ++il) {
    const int l = static_cast<int>(il);
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", Role::kAttnNorm, l, {s.n_embd}, 1, kNormJitter);
    if (s.fused) {
      add(p + "attn_qkv.weight", Role::kAttnQkv, l, {s.n_embd, n_q + 2 * n_kv}, 0, lin(s.n_embd));
    } else {
      add(p + "attn_q.weight", Role::kAttnQ, l, {s.n_embd, n_q}, 0, lin(s.n_embd));
      if (s.qkv_bias) add(p + "attn_q.bias", Role::kAttnQBias, l, {n_q}, 0, kBiasStd);
      add(p + "attn_k.weight", Role::kAttnK, l, {s.n_embd, n_kv}, 0, lin(s.n_embd));
      if (s.qkv_bias) add(p + "attn_k.bias", Role::kAttnKBias, l, {n_kv}, 0, kBiasStd);
      add(p + "attn_v.weight", Role::kAttnV, l, {s.n_embd, n_kv}, 0, lin(s.n_embd));
      if (s.qkv_bias) add(p + "attn_v.bias", Role::kAttnVBias, l, {n_kv}, 0, kBiasStd);
    }
    add(p + "attn_output.weight", Role::kAttnOut, l, {n_q, s.n_embd}, 0, lin(n_q));
    if (s.qk_norm) {
      add(p + "attn_q_norm.weight", Role::kAttnQNorm, l, {s.n_embd_head}, 1, kNormJitter);
      add(p + "attn_k_norm.weight", Role::kAttnKNorm, l, {s.n_embd_head}, 1, kNormJitter);
    }
    if (s.gemma_norms) {
      add(p + "post_attention_norm.weight", Role::kAttnPostNorm, l, {s.n_embd}, kPostNormGain,
          kNormJitter);
    }
    add(p + "ffn_norm.weight", Role::kFfnNorm, l, {s.n_embd}, 1, kNormJitter);
    if (s.n_expert > 0) {  // llama.cpp's LLM_TENSOR_FFN_{GATE_INP,GATE_EXPS,UP_EXPS,DOWN_EXPS}
      add(p + "ffn_gate_inp.weight", Role::kFfnGateInp, l, {s.n_embd, s.n_expert}, 0,
          kRouterGain / std::sqrt(static_cast<double>(s.n_embd)));
      add(p + "ffn_gate_exps.weight", Role::kFfnGateExps, l, {s.n_embd, s.n_ff_exp, s.n_expert}, 0,
          lin(s.n_embd));
      add(p + "ffn_up_exps.weight", Role::kFfnUpExps, l, {s.n_embd, s.n_ff_exp, s.n_expert}, 0,
          lin(s.n_embd));
      add(p + "ffn_down_exps.weight", Role::kFfnDownExps, l, {s.n_ff_exp, s.n_embd, s.n_expert}, 0,
          lin(s.n_ff_exp));
      continue;
    }
    if (s.fused) {  // rows [0, n_ff) the SwiGLU gate, [n_ff, 2 n_ff) the up projection
      add(p + "ffn_up.weight", Role::kFfnUp, l, {s.n_embd, 2 * s.n_ff}, 0, lin(s.n_embd));
    } else {
      add(p + "ffn_gate.weight", Role::kFfnGate, l, {s.n_embd, s.n_ff}, 0, lin(s.n_embd));
      add(p + "ffn_up.weight", Role::kFfnUp, l, {s.n_embd, s.n_ff}, 0, lin(s.n_embd));
    }
    add(p + "ffn_down.weight", Role::kFfnDown, l, {s.n_ff, s.n_embd}, 0, lin(s.n_ff));
    if (s.gemma_norms) {
      add(p + "post_ffw_norm.weight", Role::kFfnPostNorm, l, {s.n_embd}, kPostNormGain,
          kNormJitter);
    }
  }
  add("output_norm.weight", Role::kOutputNorm, -1, {s.n_embd}, 1, kNormJitter);
  if (!s.tied_embeddings)
    add("output.weight", Role::kOutput, -1, {s.n_embd, s.n_vocab}, 0, logit_std);

  const FtypeInfo& ft = ftype_info(ftype);
  for (auto& t : out) t.type = choose_type(t, s, ft);
  return out;
}

}  // namespace minfer::fixture
