// Stage 6 (architectures): qwen3moe, after llama.cpp's llama_model_qwen3moe
// (src/models/qwen3moe.cpp): qwen3's block with the dense FFN replaced by
// build_moe_ffn(softmax gating, norm_w = true, no weight scale) — layers.h ffn_moe,
// which the shared builder uses wherever a router is bound.
#include "model/arch/qwen3moe/qwen3moe.h"

#include <fmt/format.h>

namespace minfer::model::qwen3moe {

Status adjust(const gguf::Model& file, HParams& hp) {
  hp.rope_mode = graph::RopeMode::kNeox;
  const std::string& a = hp.arch;
  auto get = [&](const std::string& key, uint32_t* out) -> Status {
    MINFER_TRY(uint64_t v, file.get_u64(key));
    if (v > 0xFFFFFFFFull)
      return make_error(fmt::format("metadata key '{}' = {} is out of range", key, v));
    *out = static_cast<uint32_t>(v);
    return Ok{};
  };
  if (!file.has(a + ".expert_count")) {
    return make_error(fmt::format("{}: metadata key '{}.expert_count' is missing", a, a));
  }
  if (!file.has(a + ".expert_used_count")) {
    return make_error(fmt::format("{}: metadata key '{}.expert_used_count' is missing", a, a));
  }
  MINFER_TRY_STATUS(get(a + ".expert_count", &hp.n_expert));
  MINFER_TRY_STATUS(get(a + ".expert_used_count", &hp.n_expert_used));
  if (hp.n_expert == 0) return make_error(fmt::format("{}.expert_count is 0", a));
  if (hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert) {
    return make_error(fmt::format("{}.expert_used_count {} must be in 1..expert_count ({})", a,
                                  hp.n_expert_used, hp.n_expert));
  }
  // llama.cpp: n_ff_exp from the key, else n_ff / n_expert_used.
  if (file.has(a + ".expert_feed_forward_length")) {
    MINFER_TRY_STATUS(get(a + ".expert_feed_forward_length", &hp.n_ff_exp));
  } else {
    hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
  }
  if (hp.n_ff_exp == 0) return make_error(fmt::format("{}.expert_feed_forward_length is 0", a));
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp) {
  MINFER_TRY(ModelWeights w, bind_llama_family(binder, hp, QkvBias::kNone, FfnKind::kMoe));
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    MINFER_TRY(l.attn_q_norm, require_f32(binder, blk(il, "attn_q_norm.weight"), hp.n_embd_head));
    MINFER_TRY(l.attn_k_norm, require_f32(binder, blk(il, "attn_k_norm.weight"), hp.n_embd_head));
  }
  return w;
}

}  // namespace minfer::model::qwen3moe
