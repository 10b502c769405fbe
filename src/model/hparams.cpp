// Stage 6 (weights + topology): GGUF metadata → HParams, with consistency checks.
// Keys follow llama.cpp's LLM_KV names (src/llama-arch.cpp) so any GGUF that llama.cpp
// loads for these architectures loads here too.
#include "model/hparams.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace minfer::model {
namespace {

Result<uint32_t> get_u32(const gguf::Model& f, const std::string& key) {
  MINFER_TRY(uint64_t v, f.get_u64(key));
  if (v > std::numeric_limits<uint32_t>::max()) {
    return make_error(fmt::format("metadata key '{}' = {} is out of range", key, v));
  }
  return static_cast<uint32_t>(v);
}

Result<uint32_t> get_u32_or(const gguf::Model& f, const std::string& key, uint32_t dflt) {
  if (!f.has(key)) return dflt;
  return get_u32(f, key);
}

Result<float> get_f32_or(const gguf::Model& f, const std::string& key, float dflt) {
  if (!f.has(key)) return dflt;
  MINFER_TRY(double v, f.get_f64(key));
  return static_cast<float>(v);
}

Status check(bool ok, const std::string& msg) {
  if (!ok) return make_error(msg);
  return Ok{};
}

// Rope scaling: llama.cpp's `<arch>.rope.scaling.type` (none | linear | yarn |
// longrope) with `<arch>.rope.scaling.factor`, or the older `<arch>.rope.scale_linear`.
// Only linear scaling (positions divided by the factor) is implemented; anything else
// would silently produce wrong attention at long context, so it is refused by name.
Result<float> read_freq_scale(const gguf::Model& f, const std::string& a) {
  const std::string type_key = a + ".rope.scaling.type";
  std::string type = "none";
  if (f.has(type_key)) {
    MINFER_TRY(type, f.get_string(type_key));
  }
  MINFER_TRY(float factor, get_f32_or(f, a + ".rope.scaling.factor", 0.0f));
  if (factor == 0.0f) {
    MINFER_TRY(factor, get_f32_or(f, a + ".rope.scale_linear", 0.0f));
    if (factor != 0.0f && type == "none") type = "linear";
  }
  if (type == "none" || (type == "linear" && (factor == 0.0f || factor == 1.0f))) return 1.0f;
  if (type == "linear") {
    if (!(factor > 0.0f) || !std::isfinite(factor)) {
      return make_error(fmt::format("{}.rope.scaling.factor = {} must be > 0", a, factor));
    }
    return 1.0f / factor;
  }
  return make_error(fmt::format(
      "rope scaling type '{}' ({}) is not supported (only linear scaling is implemented)", type,
      type_key));
}

}  // namespace

Result<HParams> read_hparams(const gguf::Model& f, uint32_t n_vocab_fallback) {
  HParams hp;
  MINFER_TRY(hp.arch, f.get_string("general.architecture"));
  const std::string& a = hp.arch;
  MINFER_TRY(hp.n_layer, get_u32(f, a + ".block_count"));
  MINFER_TRY(hp.n_embd, get_u32(f, a + ".embedding_length"));
  MINFER_TRY(hp.n_ff, get_u32(f, a + ".feed_forward_length"));
  MINFER_TRY(hp.n_head, get_u32(f, a + ".attention.head_count"));
  MINFER_TRY(hp.n_head_kv, get_u32_or(f, a + ".attention.head_count_kv", hp.n_head));
  MINFER_TRY(hp.n_ctx_train, get_u32(f, a + ".context_length"));
  MINFER_TRY(hp.rms_eps, get_f32_or(f, a + ".attention.layer_norm_rms_epsilon", 0.0f));
  MINFER_TRY(hp.norm_eps, get_f32_or(f, a + ".attention.layer_norm_epsilon", 0.0f));
  MINFER_TRY(hp.rope_freq_base, get_f32_or(f, a + ".rope.freq_base", 10000.0f));
  MINFER_TRY(hp.rope_freq_scale, read_freq_scale(f, a));

  MINFER_TRY_STATUS(check(hp.n_layer > 0, a + ".block_count is 0"));
  MINFER_TRY_STATUS(check(hp.n_embd > 0 && hp.n_ff > 0, a + ".embedding_length or "
                                                            ".feed_forward_length is 0"));
  MINFER_TRY_STATUS(check(hp.n_head > 0 && hp.n_head_kv > 0 && hp.n_head % hp.n_head_kv == 0,
                          fmt::format("{}.attention.head_count {} / head_count_kv {} is not a "
                                      "grouped-query layout",
                                      a, hp.n_head, hp.n_head_kv)));
  const uint32_t head_default = hp.n_embd % hp.n_head == 0 ? hp.n_embd / hp.n_head : 0;
  MINFER_TRY(hp.n_embd_head, get_u32_or(f, a + ".attention.key_length", head_default));
  MINFER_TRY(uint32_t n_embd_head_v, get_u32_or(f, a + ".attention.value_length", hp.n_embd_head));
  MINFER_TRY_STATUS(check(hp.n_embd_head > 0 && hp.n_embd_head % 2 == 0,
                          fmt::format("head size {} (n_embd {} / head_count {}) must be even and "
                                      "> 0",
                                      hp.n_embd_head, hp.n_embd, hp.n_head)));
  MINFER_TRY_STATUS(check(n_embd_head_v == hp.n_embd_head,
                          fmt::format("{}.attention.value_length {} != key_length {} is not "
                                      "supported",
                                      a, n_embd_head_v, hp.n_embd_head)));
  MINFER_TRY(hp.n_rot, get_u32_or(f, a + ".rope.dimension_count", hp.n_embd_head));
  MINFER_TRY_STATUS(check(hp.n_rot > 0 && hp.n_rot <= hp.n_embd_head && hp.n_rot % 2 == 0,
                          fmt::format("{}.rope.dimension_count {} must be even and <= head size "
                                      "{}",
                                      a, hp.n_rot, hp.n_embd_head)));
  MINFER_TRY_STATUS(
      check((hp.rms_eps > 0.0f && std::isfinite(hp.rms_eps)) ||
                (hp.rms_eps == 0.0f && hp.norm_eps > 0.0f && std::isfinite(hp.norm_eps)),
            fmt::format("{}.attention.layer_norm_rms_epsilon (or layer_norm_epsilon) is missing "
                        "or <= 0",
                        a)));
  MINFER_TRY_STATUS(check(hp.rope_freq_base > 0.0f && std::isfinite(hp.rope_freq_base),
                          fmt::format("{}.rope.freq_base = {} must be > 0", a, hp.rope_freq_base)));
  MINFER_TRY_STATUS(check(hp.n_ctx_train > 0, a + ".context_length is 0"));

  if (f.has(a + ".vocab_size")) {
    MINFER_TRY(hp.n_vocab, get_u32(f, a + ".vocab_size"));
  } else if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
             toks != nullptr && toks->type == gguf::ValueType::kArray) {
    hp.n_vocab = static_cast<uint32_t>(toks->array.size());
  } else {
    hp.n_vocab = n_vocab_fallback;
  }
  MINFER_TRY_STATUS(check(hp.n_vocab > 0, "vocabulary size is 0"));
  return hp;
}

Status read_swa(const gguf::Model& f, HParams& hp, uint32_t default_period) {
  const std::string& a = hp.arch;
  MINFER_TRY(hp.n_swa, get_u32_or(f, a + ".attention.sliding_window", 0));
  MINFER_TRY(hp.rope_freq_base_swa, get_f32_or(f, a + ".rope.freq_base_swa", 10000.0f));
  MINFER_TRY_STATUS(
      check(hp.rope_freq_base_swa > 0.0f && std::isfinite(hp.rope_freq_base_swa),
            fmt::format("{}.rope.freq_base_swa = {} must be > 0", a, hp.rope_freq_base_swa)));
  hp.is_swa.assign(hp.n_layer, 0);
  if (hp.n_swa == 0) return Ok{};
  const std::string pkey = a + ".attention.sliding_window_pattern";
  uint32_t period = default_period;
  if (const gguf::Value* v = f.find(pkey); v != nullptr && v->type == gguf::ValueType::kArray) {
    if (v->array.size() != hp.n_layer) {
      return make_error(
          fmt::format("{} has {} entries for {} layers", pkey, v->array.size(), hp.n_layer));
    }
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      const gguf::Value& e = v->array[il];
      hp.is_swa[il] =
          (e.type == gguf::ValueType::kBool ? e.u != 0 : (e.u != 0 || e.i != 0)) ? 1 : 0;
    }
    return Ok{};
  } else if (v != nullptr) {
    MINFER_TRY(period, get_u32(f, pkey));
  }
  // llama.cpp's set_swa_pattern(n, dense_first = false): period 0 slides every layer,
  // else layer il slides when il % n < n - 1 (the last of every n is global).
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    hp.is_swa[il] = (period == 0 || il % period < period - 1) ? 1 : 0;
  }
  return Ok{};
}

std::string describe(const HParams& hp) {
  return fmt::format(
      "{}: {} layers, n_embd {}, n_ff {}, heads {}/{} (head size {}, rope {} dims, base {}{}), "
      "vocab {}, context {}{}",
      hp.arch, hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv, hp.n_embd_head, hp.n_rot,
      hp.rope_freq_base,
      hp.rope_freq_scale != 1.0f ? fmt::format(", linear scale {}", hp.rope_freq_scale) : "",
      hp.n_vocab, hp.n_ctx_train,
      hp.n_expert > 0 ? fmt::format(", experts {} of {} (n_ff_exp {})", hp.n_expert_used,
                                    hp.n_expert, hp.n_ff_exp)
                      : "");
}

}  // namespace minfer::model
