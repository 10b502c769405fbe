// Stage 14b (internal): the rule table while GBNF text is parsed, before it is
// checked (undefined rules, root, left recursion) and flattened into a Grammar.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace minfer::grammar {

struct Grammar::Builder {
  struct Rule {
    std::string name;
    std::vector<Elem> body;  // alternatives, kAlt-separated, kEnd-terminated
    bool defined = false;
    bool generated = false;  // a group or repetition; `owner` is the named rule
    uint32_t owner = 0;
    size_t def_at = 0;  // byte offset of the definition (or of the group)
    size_t ref_at = 0;  // byte offset of the first reference
  };

  std::string_view src;
  std::vector<Rule> rules;
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<CharClass> classes;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_ids;
  size_t n_elems = 0;

  std::string where(size_t offset) const;  // "line:column"
  Result<uint32_t> define(const std::string& name, size_t at);
  uint32_t reference(const std::string& name, size_t at);
  uint32_t generate(uint32_t owner, size_t at);
  void set_body(uint32_t rule, std::vector<Elem> body);
  uint32_t add_class(CharClass c);
  // Replaces out[last_start..] (one item) by its repetition {min, max}; max < 0: unbounded.
  Status repeat(uint32_t rule, size_t at, std::vector<Elem>& out, size_t last_start, uint32_t min,
                int64_t max);
};

// Sorted, merged ranges; complemented over [0, U+10FFFF] when negated.
CharClass make_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);
Status parse_gbnf_rules(Grammar::Builder& b);

}  // namespace minfer::grammar
