// Stage 15 (the loop): a batch of rows for one multi-sequence forward — any mix of
// sequences, prefill chunks and single decode tokens (ARCHITECTURE §2b).
// Invariants: the sequence count and the row mix are data, never topology (the graph
// sees only the padded row count and the padded count of logit rows); a row's logits
// are bit-identical whatever else shares its batch, its order in the batch and the
// thread count (batch invariance, invariant 8).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace minfer::engine {

using TokenId = tokenizer::TokenId;
using SeqId = int32_t;

// The token at position `pos` of sequence `seq`; `logits`: return this row's logits.
struct BatchRow {
  TokenId token = 0;
  SeqId seq = 0;
  int32_t pos = 0;
  bool logits = false;
  int32_t type = 0;  // token type (segment); read only by models with a type input
};

// Rows in caller order. Reserve once and clear() per step: a steady decode step then
// allocates nothing.
class Batch {
 public:
  Batch() = default;
  explicit Batch(size_t capacity) { rows_.reserve(capacity); }

  void clear() {
    rows_.clear();
    n_logits_ = 0;
  }
  void add(TokenId token, SeqId seq, int32_t pos, bool logits, int32_t type = 0) {
    rows_.push_back({.token = token, .seq = seq, .pos = pos, .logits = logits, .type = type});
    n_logits_ += logits ? 1U : 0U;
  }
  // `tokens` of sequence `seq` at positions pos0, pos0 + 1, ...; the last row asks for
  // logits (a prefill chunk, a decode step).
  void add_run(std::span<const TokenId> tokens, SeqId seq, int32_t pos0) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      add(tokens[i], seq, pos0 + static_cast<int32_t>(i), i + 1 == tokens.size());
    }
  }
  std::span<const BatchRow> rows() const { return rows_; }
  size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  uint32_t n_logits() const { return n_logits_; }

 private:
  std::vector<BatchRow> rows_;
  uint32_t n_logits_ = 0;
};

// The logits of one decode(): F32 [n_vocab] per row that asked for them (an encoder's
// hidden states, F32 [n_embd], when the model's graph returns embeddings). Points into
// the graph's output buffer: valid until the next forward or decode.
class BatchLogits {
 public:
  BatchLogits() = default;
  BatchLogits(const float* data, int32_t n_vocab, std::span<const int32_t> slot_of_row)
      : data_(data), n_vocab_(n_vocab), slot_of_row_(slot_of_row) {}

  // Logits of batch row `row`; MINFER_CHECKs that the row asked for them.
  std::span<const float> row(size_t row) const;
  int32_t n_vocab() const { return n_vocab_; }

 private:
  const float* data_ = nullptr;
  int32_t n_vocab_ = 0;
  std::span<const int32_t> slot_of_row_;  // per batch row: its output slot, -1 none
};

// n_tokens buckets: the padded row count a batch of n rows runs with (1, 2, 4, 8, 16,
// then multiples of 16 up to 64, then multiples of 64) so that a decode step of 3 or 5
// sequences reuses the graph of 4 or 8, and prefill chunks use a handful of shapes.
uint32_t bucket_rows(uint32_t n);

}  // namespace minfer::engine
