// Stage 14b (constraints): GBNF grammars (llama.cpp's format, grammars/README.md),
// compiled to a flat rule table, and a pushdown matcher over Unicode code points.
// Invariants: a compiled grammar has a root rule, no undefined reference and no left
// recursion that grows the stack; the matcher accepts a byte string iff it is a
// prefix of a sentence of the grammar, in strict UTF-8 (a code point split across
// calls is held as a partial state, never guessed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"

namespace minfer::grammar {

// One element of a rule body. A rule is its alternatives one after another, each
// followed by kAlt, the last by kEnd; an empty alternative is a bare kAlt/kEnd.
enum class ElemKind : uint8_t {
  kEnd,    // end of the rule
  kAlt,    // end of an alternative, another follows
  kRef,    // value: rule id
  kChars,  // value: character class id
};

struct Elem {
  ElemKind kind;
  uint32_t value;
};

// A set of code points: sorted, disjoint, inclusive ranges (negation is resolved at
// compile time, so matching is one binary search).
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;
};

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Limits that make hostile grammars fail loudly instead of exhausting memory.
constexpr uint32_t kMaxRepetition = 4096;        // m and n of x{m,n}
constexpr size_t kMaxGrammarElems = 1u << 22;    // elements after expanding repetitions
constexpr uint32_t kMaxNesting = 512;            // parenthesis depth
constexpr size_t kMaxStacksPerState = 1u << 12;  // pushdown stacks in one matcher state
// Stack elements copied while computing one step (bounds the work per step).
constexpr size_t kMaxStepWork = 1u << 21;

class Grammar {
 public:
  // Parses and compiles GBNF text. Errors carry "line:column: message".
  static Result<std::shared_ptr<const Grammar>> parse(std::string_view text,
                                                      std::string_view root = "root");

  const std::vector<Elem>& elems() const { return elems_; }
  const CharClass& char_class(uint32_t id) const { return classes_[id]; }
  size_t n_rules() const { return rule_start_.size(); }
  // Index in elems() of the first element of the rule's first alternative.
  uint32_t rule_start(uint32_t rule) const { return rule_start_[rule]; }
  // Indices in elems() where each alternative of the rule begins.
  const std::vector<uint32_t>& alts(uint32_t rule) const { return alts_[rule]; }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  uint32_t root() const { return root_; }
  // The grammar printed back as GBNF (generated rules included): for debugging.
  std::string to_gbnf() const;

  struct Builder;

 private:
  std::vector<Elem> elems_;
  std::vector<uint32_t> rule_start_;
  std::vector<std::vector<uint32_t>> alts_;
  std::vector<std::string> names_;
  std::vector<CharClass> classes_;
  uint32_t root_ = 0;
};

// A partially decoded UTF-8 sequence: `need` continuation bytes still to come.
struct Utf8Partial {
  uint32_t acc = 0;  // bits decoded so far
  uint8_t need = 0;  // 0: no partial sequence
  uint8_t len = 0;   // total length of the sequence (2..4)
  bool operator==(const Utf8Partial&) const = default;
};

// The matcher's state: an interned stack set and a pending partial code point.
struct MatchState {
  int32_t set = -1;  // id in the StateTable; < 0: dead
  Utf8Partial partial;
  bool dead() const { return set < 0; }
  uint64_t key() const {
    return (static_cast<uint64_t>(static_cast<uint32_t>(set)) << 32) |
           (static_cast<uint64_t>(partial.len) << 28) |
           (static_cast<uint64_t>(partial.need) << 24) | partial.acc;
  }
  bool operator==(const MatchState&) const = default;
};

// Interned pushdown stack sets of one grammar and their memoised transitions: a lazily
// built automaton over code points, shared by the matchers (and maskers) of the
// grammar. Not thread-safe: one table per thread. It grows with the distinct states
// visited (n_sets()).
class StateTable {
 public:
  static Result<std::shared_ptr<StateTable>> create(std::shared_ptr<const Grammar> grammar);

  const Grammar& grammar() const { return *grammar_; }
  MatchState initial() const { return MatchState{initial_, {}}; }
  // One byte of strict UTF-8 (RFC 3629): overlongs, surrogates, stray continuation
  // bytes and code points past U+10FFFF are dead ends.
  MatchState step(MatchState s, uint8_t byte);
  MatchState step_code_point(int32_t set, uint32_t cp);
  // The set contains an empty stack: the input so far is a whole sentence.
  bool set_can_end(int32_t set) const { return sets_[static_cast<size_t>(set)].can_end; }
  bool can_end(MatchState s) const {
    return !s.dead() && s.partial.need == 0 && set_can_end(s.set);
  }
  size_t n_sets() const { return sets_.size(); }
  size_t set_size(int32_t set) const { return sets_[static_cast<size_t>(set)].stacks.size(); }
  // Set once a limit was hit (kMaxStacksPerState); every later step is dead.
  const std::optional<Error>& error() const { return error_; }

  // The byte automaton: every (stack set, partial code point) state seen gets an id
  // with 256 memoised byte transitions, so the mask walk costs one load per trie node.
  int32_t dfa_id(MatchState s);  // s must not be dead
  MatchState dfa_state(int32_t d) const { return dstates_[static_cast<size_t>(d)]; }
  // Next id, or -1 for a dead end.
  int32_t dfa_step(int32_t d, uint8_t byte) {
    const int32_t t = trans_[(static_cast<size_t>(d) << 8) | byte];
    return t != kUnknown ? t : dfa_step_slow(d, byte);
  }
  size_t n_dfa_states() const { return dstates_.size(); }

 private:
  using Stack = std::vector<uint32_t>;  // element positions; top (back) is a kChars
  struct Set {
    std::vector<Stack> stacks;          // sorted, unique
    std::vector<uint32_t> top_classes;  // sorted unique class ids of the tops
    bool can_end = false;
    std::vector<int32_t> ascii;  // 128 memoised transitions (kUnknown until computed)
    std::unordered_map<uint32_t, int32_t> other;  // the same for code points >= 0x80
    // Transitions by which top classes contain the code point (bit i: top_classes[i]):
    // the next set depends on nothing else, so a code point first seen in this set
    // costs a few class lookups instead of a closure (vocabularies have tens of
    // thousands of distinct code points). Only when there are at most 64 top classes.
    std::vector<std::pair<uint64_t, int32_t>> by_signature;
  };
  static constexpr int32_t kUnknown = -2;

  explicit StateTable(std::shared_ptr<const Grammar> g) : grammar_(std::move(g)) {}
  // Expands the stacks until every top is a character class; interns the result.
  int32_t close_and_intern(std::vector<Stack> seeds);
  bool partial_viable(int32_t set, const Utf8Partial& p) const;
  int32_t dfa_step_slow(int32_t d, uint8_t byte);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Set> sets_;
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash_;
  int32_t initial_ = -1;
  std::optional<Error> error_;
  std::vector<MatchState> dstates_;
  std::unordered_map<uint64_t, int32_t> dfa_ids_;
  std::vector<int32_t> trans_;  // 256 per dfa state
};

// Advances over bytes; copies are cheap (they share the table).
class Matcher {
 public:
  static Result<Matcher> create(std::shared_ptr<const Grammar> grammar);
  explicit Matcher(std::shared_ptr<StateTable> table)
      : table_(std::move(table)), state_(table_->initial()) {}

  // Appends bytes if the result is still a prefix of a sentence; otherwise returns
  // false and leaves the state as it was.
  bool accept(std::string_view bytes);
  // Would accept() succeed? (The state is not changed.)
  bool can_accept(std::string_view bytes) const;
  bool can_end() const { return table_->can_end(state_); }
  void reset() { state_ = table_->initial(); }

  MatchState state() const { return state_; }
  void set_state(MatchState s) { state_ = s; }
  StateTable& table() const { return *table_; }
  const std::shared_ptr<StateTable>& table_ptr() const { return table_; }

 private:
  std::shared_ptr<StateTable> table_;
  MatchState state_;
};

}  // namespace minfer::grammar
