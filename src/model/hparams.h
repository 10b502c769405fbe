// Stage 6 (weights + topology): hyperparameters read from GGUF metadata.
// Invariants: every dimension is checked against the others before any graph is built
// (head counts divide, rotated dims fit a head); a rope-scaling scheme we cannot honour
// is refused by name, never ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

  // Sliding-window attention (llama.cpp's LLAMA_SWA_TYPE_STANDARD), gemma3 and phi3:
  // layer il attends only the last n_swa positions when is_swa[il]. The window size
  // is <arch>.attention.sliding_window; the layer pattern is
  // <arch>.attention.sliding_window_pattern (a bool per layer, or a period n: layers
  // with il % n < n - 1 slide) or the architecture's default period (swa_period).
  uint32_t n_swa = 0;
  std::vector<uint8_t> is_swa;          // [n_layer], 1 = sliding-window layer
  float rope_freq_base_swa = 10000.0f;  // <arch>.rope.freq_base_swa (sliding layers)
  float rope_freq_scale_swa = 1.0f;     // sliding layers keep the trained scale (1)
  float attn_scale = 0.0f;              // KQ scale; 0 = 1/sqrt(n_embd_head)
  float final_logit_softcap = 0.0f;     // <arch>.final_logit_softcapping; 0 = none

  // Encoders (bert): LayerNorm epsilon, bidirectional attention, what the graph returns
  // and how the runtime pools it.
  float norm_eps = 0.0f;        // <arch>.attention.layer_norm_epsilon (0: absent)
  bool causal = true;           // <arch>.attention.causal
  bool embeddings_out = false;  // the graph returns hidden states [n_embd, n_out], not logits
  int32_t pooling_type = -1;    // <arch>.pooling_type (llama.cpp's enum); -1: unspecified
  // A cross-encoder (cls.output.weight present): the graph returns n_cls_out scores per
  // output row instead of hidden states, and reads a per-row token type input (segment
  // A = 0 for the query part, B = 1 for the document part, as transformers does).
  uint32_t n_cls_out = 0;
  std::vector<std::string> cls_labels;  // <arch>.classifier.output_labels (may be empty)
  bool token_type_input = false;

  uint32_t n_expert = 0;       // <arch>.expert_count (0: dense)
  uint32_t n_expert_used = 0;  // <arch>.expert_used_count
  uint32_t n_ff_exp = 0;       // <arch>.expert_feed_forward_length

  bool layer_is_swa(int il) const {
    return n_swa > 0 && static_cast<size_t>(il) < is_swa.size() && is_swa[il] != 0;
  }

  uint32_t n_embd_kv() const { return n_embd_head * n_head_kv; }  // K (= V) row width
};

// Reads the generic `<arch>.*` keys. `n_vocab_fallback` is used when neither
// `<arch>.vocab_size` nor `tokenizer.ggml.tokens` is present (the token_embd rows).
// Errors name the key (missing, wrong type, inconsistent value) and the file.
Result<HParams> read_hparams(const gguf::Model& file, uint32_t n_vocab_fallback);

// Reads the sliding-window keys (above) into hp: `default_period` is the architecture's
// pattern when the file names none (gemma3: 6, llama.cpp's load_swa_pattern default;
// 1 with dense_first false would make no layer slide, so phi3 passes 0 = every layer).
Status read_swa(const gguf::Model& file, HParams& hp, uint32_t default_period);

// One line for the load banner: "llama: 30 layers, n_embd 576, 9/3 heads, ...".
std::string describe(const HParams& hp);

}  // namespace minfer::model
