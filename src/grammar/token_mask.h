// Stage 14b (constraints → sampler): which tokens of a vocabulary may come next.
// Invariant: the mask is exact — a token is allowed iff its bytes extend the accepted
// prefix to a longer prefix of a sentence (strict UTF-8, partial code points across
// tokens included); end-of-generation tokens iff the grammar can end here; control,
// unknown, unused and empty tokens never.
// Speed: all token bytes go into one byte trie per vocabulary, stored in preorder so
// the walk is a linear scan that skips a whole subtree when its prefix dies; each
// byte is one memoised transition of the StateTable's byte automaton (a load once
// the state has been seen); masks are cached per state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace minfer::grammar {

using tokenizer::TokenId;

// The vocabulary's token bytes as a preorder byte trie. Immutable; share it between
// grammars and threads.
class TokenVocab {
 public:
  static std::shared_ptr<const TokenVocab> build(const tokenizer::Tokenizer& tok);

  int32_t n_vocab() const { return n_vocab_; }
  // The bytes a token emits; empty for tokens that are never text (control, ...).
  const std::string& bytes(TokenId id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_eog(TokenId id) const { return eog_[static_cast<size_t>(id)] != 0; }
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }
  size_t n_nodes() const { return byte_.size(); }

 private:
  friend class TokenMasker;
  int32_t n_vocab_ = 0;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> eog_;
  std::vector<TokenId> eog_ids_;
  // Trie node i (preorder): its byte, its depth (1 = a first byte), the index past its
  // subtree, and the tokens that end at it: tokens_[tok_begin_[i] .. tok_begin_[i+1]).
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> depth_;
  std::vector<uint32_t> end_;
  std::vector<uint32_t> tok_begin_;
  std::vector<TokenId> tokens_;
  uint32_t max_depth_ = 0;
};

// A bitset over the vocabulary.
struct TokenMask {
  std::vector<uint64_t> bits;
  bool test(TokenId id) const {
    return (bits[static_cast<size_t>(id) >> 6] >> (static_cast<uint32_t>(id) & 63)) & 1;
  }
  void set(TokenId id) {
    bits[static_cast<size_t>(id) >> 6] |= 1ull << (static_cast<uint32_t>(id) & 63);
  }
  size_t count() const;
  bool operator==(const TokenMask&) const = default;
};

struct MaskStats {
  uint64_t masks_computed = 0;
  uint64_t mask_cache_hits = 0;
  uint64_t nodes_visited = 0;  // trie nodes stepped over by the computed masks
  uint64_t cache_clears = 0;
};

// Masks for the matchers of one StateTable over one vocabulary. Not thread-safe.
class TokenMasker {
 public:
  // Cached masks kept before the cache is cleared (each is n_vocab bits).
  static constexpr size_t kMaxCachedMasks = 1024;

  TokenMasker(std::shared_ptr<StateTable> table, std::shared_ptr<const TokenVocab> vocab);

  // The mask for the matcher's state; valid until the next call. An error when the
  // grammar hit a limit of the StateTable.
  Result<const TokenMask*> mask(const Matcher& m);
  // Is the mask for the matcher's state in the cache (mask() then costs a lookup)?
  bool has_cached(const Matcher& m) const { return cache_.count(m.state().key()) != 0; }
  // Is one token allowed? Cheaper than a mask: sample first, mask on rejection.
  bool allows(const Matcher& m, TokenId id) const;
  // Advances over a token (false, unchanged, if it is not allowed). An EOG token is
  // accepted where the grammar can end and leaves the state as it is.
  bool accept_token(Matcher& m, TokenId id) const;
  // The same mask by a separate check of every token (the oracle for tests).
  TokenMask mask_brute_force(const Matcher& m) const;

  const MaskStats& stats() const { return stats_; }
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  void compute(MatchState start, TokenMask& out);

  std::shared_ptr<StateTable> table_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::unordered_map<uint64_t, std::unique_ptr<TokenMask>> cache_;
  std::vector<int32_t> walk_;  // per-depth byte-automaton states of the trie walk
  MaskStats stats_;
};

}  // namespace minfer::grammar
