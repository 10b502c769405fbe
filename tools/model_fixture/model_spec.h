// Tools (fixtures): what minfer-model-fixture writes — architecture hyper-parameters,
// presets, the tensor list with GGUF names and shapes, the per-tensor weight type
// and the scale of each tensor's random values.
// Invariants: tensor names, shapes and metadata keys are the ones llama.cpp's
// convert_hf_to_gguf.py writes for the architecture (gguf-py/gguf/constants.py,
// conversion/llama.py, conversion/qwen.py); per-tensor types of quantized files follow
// llama.cpp's llama-quantize without an importance matrix (src/llama-quant.cpp,
// llama_tensor_get_type), so a fixture looks like a file a user would download.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace minfer::fixture {

enum class Arch { kQwen2, kLlama, kQwen3, kGemma3, kPhi3, kQwen3Moe };
std::optional<Arch> arch_from_name(std::string_view name);
std::string_view arch_name(Arch a);

struct Shape {
  Arch arch = Arch::kQwen2;
  uint64_t n_vocab = 0;  // from the vocabulary GGUF
  uint64_t n_embd = 0;
  uint64_t n_layer = 0;
  uint64_t n_head = 0;
  uint64_t n_head_kv = 0;
  uint64_t n_embd_head = 0;  // head dim of q, k and v
  uint64_t n_ff = 0;
  uint64_t n_ctx_train = 0;
  double rope_freq_base = 10000.0;
  double rms_eps = 1e-5;
  bool tied_embeddings = false;  // no output.weight: the output reuses token_embd
  bool qkv_bias = false;         // attn_{q,k,v}.bias (Qwen2)
  bool qk_norm = false;          // attn_{q,k}_norm.weight [head_dim] (Qwen3, Gemma 3)
  bool gemma_norms = false;      // post_attention_norm / post_ffw_norm (Gemma 3)
  uint64_t sliding_window = 0;   // <arch>.attention.sliding_window (Gemma 3; 0 = none)
  bool fused = false;            // attn_qkv and ffn_up = gate | up (Phi-3); the _K mixes'
                                 // attn_qkv rules of llama-quantize are not modelled
                                 // (use F32/F16/Q8_0 for these)
  // Mixture of experts (qwen3moe): every block's FFN is n_expert SwiGLU experts of width
  // n_ff_exp, n_expert_used of them per token (ffn_gate_inp router [n_embd, n_expert],
  // ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps [n_ff_exp, n_embd,
  // n_expert]); 0 = a dense FFN of n_ff.
  uint64_t n_expert = 0;
  uint64_t n_expert_used = 0;
  uint64_t n_ff_exp = 0;
};

// Presets: "tiny" (n_embd 256 so every k-quant's 256-block fits a row, 2 layers,
// 4 heads / 2 KV heads of 64, n_ff 512) and "qwen2.5-0.5b" (n_embd 896, 24 layers,
// 14 / 2 heads of 64, n_ff 4864, context 32768, rope base 1e6, eps 1e-6, tied
// embeddings, QKV bias). Arch defaults: qwen2 → tied + QKV bias + base 1e6 + eps 1e-6;
// llama → untied, no bias, base 10000, eps 1e-5; qwen3 → tied, QK-norm, no bias, base
// 1e6, eps 1e-6; gemma3 → tied, QK-norm, post-norms, head dim 256 (the "tiny" preset: 6
// layers so layer 5 is global, sliding window 32), base 1e6, eps 1e-6.
// "llama-0.1b" (llama only): every row a multiple of 256, so each K-quant weight is real
// 256-element super-blocks with no fallback type (n_embd 768, 12 layers, 12 / 4 heads of
// 64, n_ff 2048, context 2048, untied). "qwen3-0.6b": Qwen3-0.6B's shape (n_embd 1024, 28 layers,
// 16 / 8 heads of 128, n_ff 3072, context 40960, tied). qwen3moe → qwen3's defaults with a
// mixture-of-experts FFN: "tiny" has 8 experts of width 128, 2 used per token; "qwen3moe-0.5b" (a
// benchmark shape, ~0.5B weights of which ~0.2B are read per token: n_embd 1024, 12 layers, 16 / 4
// heads of 64, 16 experts of width 512, 2 used, context 32768, tied).
// n_vocab stays 0 (set from the vocab).
std::optional<Shape> preset(std::string_view name, Arch arch);
std::vector<std::string> preset_names();

// A weight mix, named as llama.cpp names them (llama_ftype).
enum class Ftype {
  kF32,
  kF16,
  kBF16,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ4_K_S,
  kQ4_K_M,
  kQ5_K_M,
  kQ6_K
};
struct FtypeInfo {
  Ftype ftype;
  std::string_view name;  // CLI name, lower case: "q4_k_m"
  uint32_t llama_ftype;   // general.file_type (LLAMA_FTYPE_*)
  DType base;             // type of most 2-D weights
};
std::optional<FtypeInfo> ftype_from_name(std::string_view name);
const FtypeInfo& ftype_info(Ftype f);
std::vector<std::string> ftype_names();

enum class Role {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOut,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kAttnQNorm,
  kAttnKNorm,
  kAttnPostNorm,
  kFfnPostNorm,
  kAttnQkv,
  kFfnGateInp,   // the router of a mixture of experts
  kFfnGateExps,  // 3-D: one matrix per expert
  kFfnUpExps,
  kFfnDownExps,
};

struct TensorPlan {
  std::string name;  // GGUF name: "blk.3.attn_q.weight"
  Role role;
  int layer = -1;              // -1 outside blocks
  std::vector<uint64_t> dims;  // ne[0] first
  DType type = DType::kF32;
  double mean = 0;  // values are mean + std * unit_normal
  double std = 0;
};

// Tensors in the order the file stores them: token_embd, then per block attn_norm,
// attn_q/k/v (+ biases), attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down (a mixture of
// experts: ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps), then
// output_norm and output (untied only). Types per `ftype` (see model_spec.cpp).
std::vector<TensorPlan> plan_tensors(const Shape& s, Ftype ftype);

// Why `s` cannot be written ("" if it can).
std::string shape_problem(const Shape& s);

}  // namespace minfer::fixture
