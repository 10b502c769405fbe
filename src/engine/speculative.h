// Stage 15 (the loop): speculative decoding's drafters — prompt lookup (an n-gram of the
// history matched earlier in it) and a draft model with its own Context — and the check
// that a draft model shares the target's vocabulary. The Generator verifies a draft as
// one batch of rows of its sequence (engine/generate.h).
// Invariants: a draft is a deterministic function of the history (the draft model's most
// likely token, ties to the lower id), so verification by sampling the target at every
// row and keeping the draft while it agrees is exact speculative sampling (Leviathan et
// al. 2023, §2.3, with a one-hot draft distribution): the tokens are those a plain run
// samples — byte for byte, as batch invariance (ARCHITECTURE §2.8) gives every row the
// logits it has decoded alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/result.h"
#include "engine/batch.h"
#include "engine/engine.h"

namespace minfer::engine {

// How a run drafts (llama.cpp's spellings: --spec-ngram, -md, --draft-max, --draft-min,
// --draft-p-min). At most one drafter: `ngram` > 0 or `draft` set.
struct SpecOptions {
  int32_t ngram = 0;         // prompt lookup: the last `ngram` tokens matched in the history
  Context* draft = nullptr;  // a draft model's context, sized like the target's (set_n_ctx)
  int32_t n_max = 16;        // tokens drafted at most per verification
  int32_t n_min = 0;         // a shorter draft is not verified (a plain step runs instead)
  float p_min = 0.75f;       // the draft model stops at a token it gives less probability
  bool enabled() const { return ngram > 0 || draft != nullptr; }
};

// Checks that `draft` can draft for `target` (llama.cpp's common_speculative_are_compatible):
// the same tokenizer model, BOS/EOS ids and add-BOS/EOS flags, vocabulary sizes within 128
// and the same text for every token id from 5 up to the smaller size. Error: the first
// difference, named.
Status check_draft_vocab(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft);

// Prompt lookup: finds the latest earlier occurrence of the last `n` tokens of `history`
// and appends to `out` up to `n_max` tokens that followed it; a continuation that reaches
// the end of the history goes on with the tokens it has drafted (a repeating pattern
// drafts a full n_max). Returns the number appended (0: no match, or a history shorter
// than n + 1).
size_t ngram_draft(std::span<const TokenId> history, int32_t n, int32_t n_max,
                   std::vector<TokenId>& out);

// A draft model's pick from its logits (F32 [n_vocab]): the most likely token (the lowest
// id among equals) when its softmax probability is at least p_min and it is inside the
// target's vocabulary (n_vocab_target); none otherwise (the draft ends there).
std::optional<TokenId> draft_token(std::span<const float> logits, float p_min,
                                   int32_t n_vocab_target);

// A draft model on its own context (sequence 0). It keeps the tokens of its KV; before
// drafting it removes what differs from the history and decodes the rest, so rollbacks
// and context shifts of the target need no bookkeeping here.
class DraftModel {
 public:
  // `ctx` must be set (set_n_ctx) to at least the target's context. `n_batch`: tokens per
  // catch-up forward (0: at once).
  DraftModel(Context& ctx, int32_t n_batch, int32_t n_max);

  // Appends to `out` up to n_max tokens continuing `history` (the target's sequence,
  // positions 0..size-1): the draft's most likely token while its probability is at least
  // p_min (the first one below ends the draft, not included), and never a token past the
  // target's vocabulary (`n_vocab_target`).
  Status draft(std::span<const TokenId> history, int32_t n_max, float p_min, int32_t n_vocab_target,
               std::vector<TokenId>& out);
  int64_t n_forwards() const { return n_forwards_; }

 private:
  Context& ctx_;
  int32_t n_batch_;
  Batch batch_;
  std::vector<TokenId> kv_tokens_;  // the draft KV's tokens, positions 0..size-1
  int64_t n_forwards_ = 0;
};

}  // namespace minfer::engine
