// Stage 14b: the vocabulary trie and the token mask walk (see token_mask.h).
// The trie idea — check shared token prefixes once — is the one llguidance and
// XGrammar describe; here the walk runs over the memoised StateTable, so a token
// prefix whose state has been seen before costs one array lookup per byte.
#include "grammar/token_mask.h"

#include <algorithm>
#include <bit>
#include <numeric>

namespace minfer::grammar {

size_t TokenMask::count() const {
  size_t n = 0;
  for (uint64_t w : bits) n += static_cast<size_t>(std::popcount(w));
  return n;
}

std::shared_ptr<const TokenVocab> TokenVocab::build(const tokenizer::Tokenizer& tok) {
  auto v = std::make_shared<TokenVocab>();
  const int32_t n = tok.n_vocab();
  v->n_vocab_ = n;
  v->bytes_.resize(static_cast<size_t>(n));
  v->eog_.assign(static_cast<size_t>(n), 0);
  constexpr uint32_t kNeverText =
      tokenizer::kAttrControl | tokenizer::kAttrUnknown | tokenizer::kAttrUnused;
  for (TokenId id = 0; id < n; ++id) {
    if (tok.is_eog(id)) {
      v->eog_[static_cast<size_t>(id)] = 1;
      v->eog_ids_.push_back(id);
      continue;
    }
    if (tok.token_attr(id) & kNeverText) continue;
    v->bytes_[static_cast<size_t>(id)] = tok.token_to_bytes(id, false);
  }
  // Preorder trie from the tokens sorted by their bytes: a node per distinct prefix.
  std::vector<TokenId> order;
  for (TokenId id = 0; id < n; ++id) {
    if (!v->bytes_[static_cast<size_t>(id)].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    const auto& x = v->bytes_[static_cast<size_t>(a)];
    const auto& y = v->bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  std::vector<uint32_t> path;  // node index per depth - 1
  const std::string* prev = nullptr;
  std::vector<std::vector<TokenId>> node_tokens;
  for (TokenId id : order) {
    const std::string& s = v->bytes_[static_cast<size_t>(id)];
    size_t lcp = 0;
    if (prev) {
      const size_t m = std::min(prev->size(), s.size());
      while (lcp < m && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    while (path.size() > lcp) {
      v->end_[path.back()] = static_cast<uint32_t>(v->byte_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(v->byte_.size()));
      v->byte_.push_back(static_cast<uint8_t>(s[d]));
      v->depth_.push_back(static_cast<uint32_t>(d + 1));
      v->end_.push_back(0);
      node_tokens.emplace_back();
    }
    node_tokens[path.back()].push_back(id);
    v->max_depth_ = std::max(v->max_depth_, static_cast<uint32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    v->end_[path.back()] = static_cast<uint32_t>(v->byte_.size());
    path.pop_back();
  }
  v->tok_begin_.reserve(node_tokens.size() + 1);
  for (const auto& t : node_tokens) {
    v->tok_begin_.push_back(static_cast<uint32_t>(v->tokens_.size()));
    v->tokens_.insert(v->tokens_.end(), t.begin(), t.end());
  }
  v->tok_begin_.push_back(static_cast<uint32_t>(v->tokens_.size()));
  return v;
}

TokenMasker::TokenMasker(std::shared_ptr<StateTable> table, std::shared_ptr<const TokenVocab> vocab)
    : table_(std::move(table)), vocab_(std::move(vocab)) {
  walk_.resize(vocab_->max_depth_ + 1);
}

void TokenMasker::compute(MatchState start, TokenMask& out) {
  const TokenVocab& v = *vocab_;
  out.bits.assign((static_cast<size_t>(v.n_vocab_) + 63) / 64, 0);
  walk_[0] = table_->dfa_id(start);
  const uint32_t n = static_cast<uint32_t>(v.byte_.size());
  const uint8_t* bytes = v.byte_.data();
  const uint32_t* depth = v.depth_.data();
  const uint32_t* end = v.end_.data();
  const uint32_t* tok_begin = v.tok_begin_.data();
  int32_t* walk = walk_.data();
  uint64_t visited = 0;
  for (uint32_t i = 0; i < n;) {
    ++visited;
    const int32_t next = table_->dfa_step(walk[depth[i] - 1], bytes[i]);
    if (next < 0) {
      i = end[i];  // no token below this prefix can be allowed
      continue;
    }
    walk[depth[i]] = next;
    for (uint32_t t = tok_begin[i]; t < tok_begin[i + 1]; ++t) out.set(v.tokens_[t]);
    ++i;
  }
  if (table_->can_end(start)) {
    for (TokenId id : v.eog_ids_) out.set(id);
  }
  stats_.nodes_visited += visited;
}

Result<const TokenMask*> TokenMasker::mask(const Matcher& m) {
  MINFER_CHECK(&m.table() == table_.get(), "TokenMasker: matcher of another StateTable");
  const MatchState s = m.state();
  if (table_->error()) return *table_->error();
  if (s.dead()) return make_error("grammar: the matcher is in a dead state");
  auto it = cache_.find(s.key());
  if (it != cache_.end()) {
    ++stats_.mask_cache_hits;
    return it->second.get();
  }
  if (cache_.size() >= kMaxCachedMasks) {
    cache_.clear();
    ++stats_.cache_clears;
  }
  auto mask = std::make_unique<TokenMask>();
  compute(s, *mask);
  ++stats_.masks_computed;
  if (table_->error()) return *table_->error();
  return cache_.emplace(s.key(), std::move(mask)).first->second.get();
}

bool TokenMasker::allows(const Matcher& m, TokenId id) const {
  if (id < 0 || id >= vocab_->n_vocab_) return false;
  if (vocab_->is_eog(id)) return m.can_end();
  const std::string& b = vocab_->bytes(id);
  return !b.empty() && m.can_accept(b);
}

bool TokenMasker::accept_token(Matcher& m, TokenId id) const {
  if (id < 0 || id >= vocab_->n_vocab_) return false;
  if (vocab_->is_eog(id)) return m.can_end();
  const std::string& b = vocab_->bytes(id);
  return !b.empty() && m.accept(b);
}

TokenMask TokenMasker::mask_brute_force(const Matcher& m) const {
  // Deliberately the plain path: StateTable::step byte by byte, no byte automaton,
  // no trie, no cache.
  TokenMask out;
  out.bits.assign((static_cast<size_t>(vocab_->n_vocab_) + 63) / 64, 0);
  for (TokenId id = 0; id < vocab_->n_vocab_; ++id) {
    if (vocab_->is_eog(id)) {
      if (m.can_end()) out.set(id);
      continue;
    }
    const std::string& b = vocab_->bytes(id);
    if (b.empty()) continue;
    MatchState s = m.state();
    for (char c : b) {
      s = table_->step(s, static_cast<uint8_t>(c));
      if (s.dead()) break;
    }
    if (!s.dead()) out.set(id);
  }
  return out;
}

}  // namespace minfer::grammar
