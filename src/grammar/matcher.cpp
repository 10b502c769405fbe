// Stage 14b: the pushdown matcher. A state is a set of stacks of element positions
// whose tops are character classes (llama.cpp's representation); sets are interned
// and their transitions memoised per code point, so a state seen before advances by
// one table lookup — the grammar becomes a lazily built automaton. Bytes are decoded
// as strict UTF-8; a partial code point is kept only if some completion of it can
// match a top class.
#include <algorithm>
#include <unordered_set>

#include "grammar/grammar.h"

namespace minfer::grammar {
namespace {

bool ends_alt(ElemKind k) {
  return k == ElemKind::kEnd || k == ElemKind::kAlt;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

struct StackHash {
  size_t operator()(const std::vector<uint32_t>& s) const {
    uint64_t h = s.size();
    for (uint32_t v : s) h = mix(h, v);
    return static_cast<size_t>(h);
  }
};

constexpr uint32_t kMinCp[5] = {0, 0, 0x80, 0x800, 0x10000};

}  // namespace

Result<std::shared_ptr<StateTable>> StateTable::create(std::shared_ptr<const Grammar> grammar) {
  auto t = std::shared_ptr<StateTable>(new StateTable(std::move(grammar)));
  const Grammar& g = *t->grammar_;
  std::vector<Stack> seeds;
  for (uint32_t a : g.alts(g.root())) {
    if (ends_alt(g.elems()[a].kind)) {
      seeds.emplace_back();
    } else {
      seeds.push_back({a});
    }
  }
  t->initial_ = t->close_and_intern(std::move(seeds));
  if (t->error_) return *t->error_;
  return t;
}

int32_t StateTable::close_and_intern(std::vector<Stack> todo) {
  const Grammar& g = *grammar_;
  const auto& elems = g.elems();
  std::unordered_set<Stack, StackHash> seen;
  Set set;
  size_t work = 0;
  while (!todo.empty()) {
    Stack st = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(st).second) continue;
    work += st.size() + 1;
    if (seen.size() > 4 * kMaxStacksPerState || work > kMaxStepWork) {
      error_ = make_error("grammar state too large: more than " +
                          std::to_string(4 * kMaxStacksPerState) + " stacks or " +
                          std::to_string(kMaxStepWork) +
                          " stack elements explored in one step (a highly ambiguous grammar)");
      return -1;
    }
    if (st.empty()) {
      set.can_end = true;
      set.stacks.push_back(std::move(st));
      continue;
    }
    const uint32_t pos = st.back();
    const Elem e = elems[pos];
    if (e.kind == ElemKind::kChars) {
      set.stacks.push_back(std::move(st));
      if (set.stacks.size() > kMaxStacksPerState) {
        error_ =
            make_error("grammar state too large: more than " + std::to_string(kMaxStacksPerState) +
                       " pushdown stacks (a highly ambiguous grammar)");
        return -1;
      }
      continue;
    }
    // A rule reference: replace it by what follows it, then each alternative's start.
    st.pop_back();
    if (!ends_alt(elems[pos + 1].kind)) st.push_back(pos + 1);
    for (uint32_t a : g.alts(e.value)) {
      Stack ns = st;
      if (!ends_alt(elems[a].kind)) ns.push_back(a);
      todo.push_back(std::move(ns));
    }
  }
  if (set.stacks.empty()) return -1;
  std::sort(set.stacks.begin(), set.stacks.end());
  set.stacks.erase(std::unique(set.stacks.begin(), set.stacks.end()), set.stacks.end());
  uint64_t h = set.stacks.size();
  for (const auto& s : set.stacks) h = mix(h, StackHash{}(s));
  auto& bucket = by_hash_[h];
  for (int32_t id : bucket) {
    if (sets_[static_cast<size_t>(id)].stacks == set.stacks) return id;
  }
  for (const auto& s : set.stacks) {
    if (!s.empty()) set.top_classes.push_back(elems[s.back()].value);
  }
  std::sort(set.top_classes.begin(), set.top_classes.end());
  set.top_classes.erase(std::unique(set.top_classes.begin(), set.top_classes.end()),
                        set.top_classes.end());
  set.ascii.assign(128, kUnknown);
  const auto id = static_cast<int32_t>(sets_.size());
  sets_.push_back(std::move(set));
  bucket.push_back(id);
  return id;
}

MatchState StateTable::step_code_point(int32_t set_id, uint32_t cp) {
  if (set_id < 0 || error_) return MatchState{};
  {
    Set& s = sets_[static_cast<size_t>(set_id)];
    if (cp < 0x80) {
      if (s.ascii[cp] != kUnknown) return MatchState{s.ascii[cp], {}};
    } else {
      auto it = s.other.find(cp);
      if (it != s.other.end()) return MatchState{it->second, {}};
    }
  }
  const Grammar& g = *grammar_;
  const auto& elems = g.elems();
  // The classes of the tops that contain cp decide the next set.
  uint64_t signature = 0;
  const bool by_signature = sets_[static_cast<size_t>(set_id)].top_classes.size() <= 64;
  if (by_signature) {
    Set& s = sets_[static_cast<size_t>(set_id)];
    for (size_t i = 0; i < s.top_classes.size(); ++i) {
      if (g.char_class(s.top_classes[i]).contains(cp)) signature |= uint64_t{1} << i;
    }
    for (const auto& [sig, next] : s.by_signature) {
      if (sig != signature) continue;
      if (cp < 0x80) {
        s.ascii[cp] = next;
      } else {
        s.other.emplace(cp, next);
      }
      return MatchState{next, {}};
    }
  }
  std::vector<Stack> seeds;
  for (const Stack& st : sets_[static_cast<size_t>(set_id)].stacks) {
    if (st.empty()) continue;
    const uint32_t top = st.back();
    if (!g.char_class(elems[top].value).contains(cp)) continue;
    Stack ns(st.begin(), st.end() - 1);
    if (!ends_alt(elems[top + 1].kind)) ns.push_back(top + 1);
    seeds.push_back(std::move(ns));
  }
  const int32_t next = seeds.empty() ? -1 : close_and_intern(std::move(seeds));
  if (error_) return MatchState{};
  Set& s = sets_[static_cast<size_t>(set_id)];  // sets_ may have grown
  if (by_signature) s.by_signature.emplace_back(signature, next);
  if (cp < 0x80) {
    s.ascii[cp] = next;
  } else {
    s.other.emplace(cp, next);
  }
  return MatchState{next, {}};
}

bool StateTable::partial_viable(int32_t set_id, const Utf8Partial& p) const {
  const uint32_t shift = 6u * p.need;
  uint32_t lo = p.acc << shift;
  uint32_t hi = lo | ((1u << shift) - 1);
  lo = std::max(lo, kMinCp[p.len]);
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return false;
  const Grammar& g = *grammar_;
  for (uint32_t c : sets_[static_cast<size_t>(set_id)].top_classes) {
    const CharClass& cls = g.char_class(c);
    // Surrogates (U+D800..U+DFFF) are not code points UTF-8 may encode.
    if (lo <= 0xD7FF && cls.intersects(lo, std::min(hi, 0xD7FFu))) return true;
    if (hi >= 0xE000 && cls.intersects(std::max(lo, 0xE000u), hi)) return true;
  }
  return false;
}

MatchState StateTable::step(MatchState s, uint8_t b) {
  if (s.dead() || error_) return MatchState{};
  Utf8Partial p = s.partial;
  if (p.need == 0) {
    if (b < 0x80) return step_code_point(s.set, b);
    if (b >= 0xC2 && b <= 0xDF) {
      p = {static_cast<uint32_t>(b & 0x1F), 1, 2};
    } else if (b >= 0xE0 && b <= 0xEF) {
      p = {static_cast<uint32_t>(b & 0x0F), 2, 3};
    } else if (b >= 0xF0 && b <= 0xF4) {
      p = {static_cast<uint32_t>(b & 0x07), 3, 4};
    } else {
      return MatchState{};  // a continuation byte or an invalid lead
    }
  } else {
    if ((b & 0xC0) != 0x80) return MatchState{};
    p.acc = (p.acc << 6) | (b & 0x3Fu);
    --p.need;
    if (p.need == 0) {
      const uint32_t cp = p.acc;
      if (cp < kMinCp[p.len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return MatchState{};
      }
      return step_code_point(s.set, cp);
    }
  }
  if (!partial_viable(s.set, p)) return MatchState{};
  return MatchState{s.set, p};
}

int32_t StateTable::dfa_id(MatchState s) {
  MINFER_CHECK(!s.dead(), "dfa_id of a dead state");
  auto [it, fresh] = dfa_ids_.try_emplace(s.key(), static_cast<int32_t>(dstates_.size()));
  if (fresh) {
    dstates_.push_back(s);
    trans_.resize(dstates_.size() << 8, kUnknown);
  }
  return it->second;
}

int32_t StateTable::dfa_step_slow(int32_t d, uint8_t byte) {
  const MatchState next = step(dstates_[static_cast<size_t>(d)], byte);
  if (error_) return -1;  // a limit, not a dead end: not memoised
  const int32_t id = next.dead() ? -1 : dfa_id(next);
  trans_[(static_cast<size_t>(d) << 8) | byte] = id;
  return id;
}

Result<Matcher> Matcher::create(std::shared_ptr<const Grammar> grammar) {
  MINFER_TRY(auto table, StateTable::create(std::move(grammar)));
  return Matcher(std::move(table));
}

bool Matcher::can_accept(std::string_view bytes) const {
  if (state_.dead()) return false;
  int32_t d = table_->dfa_id(state_);
  for (char c : bytes) {
    d = table_->dfa_step(d, static_cast<uint8_t>(c));
    if (d < 0) return false;
  }
  return true;
}

bool Matcher::accept(std::string_view bytes) {
  if (state_.dead()) return false;
  int32_t d = table_->dfa_id(state_);
  for (char c : bytes) {
    d = table_->dfa_step(d, static_cast<uint8_t>(c));
    if (d < 0) return false;
  }
  state_ = table_->dfa_state(d);
  return true;
}

}  // namespace minfer::grammar
