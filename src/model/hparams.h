// Stage 6 (weights + topology): hyperparameters read from GGUF metadata.
// Invariants: every dimension is checked against the others before any graph is built
// (head counts divide, rotated dims fit a head); a rope-scaling scheme we cannot honour
// is refused by name, never ignored.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "gguf/gguf.h"
#include "graph/ops.h"

namespace minfer::model {

struct HParams {
  std::string arch;                 // general.architecture ("llama", "qwen2")
  uint32_t n_layer = 0;             // <arch>.block_count
  uint32_t n_embd = 0;              // <arch>.embedding_length
  uint32_t n_ff = 0;                // <arch>.feed_forward_length
  uint32_t n_head = 0;              // <arch>.attention.head_count
  uint32_t n_head_kv = 0;           // <arch>.attention.head_count_kv (default n_head)
  uint32_t n_embd_head = 0;         // <arch>.attention.key_length (default n_embd / n_head)
  uint32_t n_rot = 0;               // <arch>.rope.dimension_count (default n_embd_head)
  uint32_t n_ctx_train = 0;         // <arch>.context_length
  uint32_t n_vocab = 0;             // <arch>.vocab_size, else the token list, else token_embd
  float rms_eps = 0.0f;             // <arch>.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // <arch>.rope.freq_base
  float rope_freq_scale = 1.0f;     // 1 / <arch>.rope.scaling.factor for linear scaling
  graph::RopeMode rope_mode = graph::RopeMode::kNormal;  // set by the architecture

  uint32_t n_embd_kv() const { return n_embd_head * n_head_kv; }  // K (= V) row width
};

// Reads the generic `<arch>.*` keys. `n_vocab_fallback` is used when neither
// `<arch>.vocab_size` nor `tokenizer.ggml.tokens` is present (the token_embd rows).
// Errors name the key (missing, wrong type, inconsistent value) and the file.
Result<HParams> read_hparams(const gguf::Model& file, uint32_t n_vocab_fallback);

// One line for the load banner: "llama: 30 layers, n_embd 576, 9/3 heads, ...".
std::string describe(const HParams& hp);

}  // namespace minfer::model
