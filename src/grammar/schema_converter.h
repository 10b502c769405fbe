// Stage 14b (internal): the JSON Schema → GBNF converter behind json_schema_to_gbnf.
// Each schema node becomes a named rule; rules_ is ordered by name, so the output does
// not depend on which file's visit adds a rule, only on the order of the calls.
// Files: json_schema.cpp (the rule table, keyword checks, $refs, dispatch by type),
// schema_combine.cpp (anyOf / oneOf / allOf), schema_object.cpp (objects),
// schema_array.cpp (arrays, tuples, uniqueItems), schema_scalar.cpp (strings,
// integers, numbers).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace minfer::grammar::schema {

using Json = nlohmann::ordered_json;

// Keywords that only annotate (they never change which documents are valid).
const std::set<std::string>& annotations();

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  // GBNF text whose start rule is `root`, then every other rule by name.
  Result<std::string> run();

 private:
  // json_schema.cpp: the rule table and the dispatch.
  // Makes a primitive rule (and what it uses) part of the output; returns its name.
  std::string use(const std::string& name);
  // A new rule named after `hint` (made unique); returns its name.
  std::string add_rule(const std::string& hint, const std::string& body);
  static Error unsupported(const std::string& kw, const std::string& path);
  Status check_keywords(const Json& s, const std::set<std::string>& allowed,
                        const std::string& path);
  static std::string json_literal(const Json& v);
  // The GBNF repetition suffix for {lo, hi} (hi UINT64_MAX: unbounded).
  static std::string repeat(uint64_t lo, uint64_t hi);
  // A count keyword (minItems, maxLength, ...): a non-negative integer up to
  // kMaxRepetition, or `dflt` when absent.
  static Result<uint64_t> count(const Json& s, const char* kw, uint64_t dflt,
                                const std::string& path);
  Result<const Json*> resolve(const std::string& ref, const std::string& path);
  Result<std::string> visit(const Json& s, const std::string& path, int depth);
  static const std::set<std::string>& typed_keywords();
  Result<std::string> visit_type(const Json& s, const std::string& t, const std::string& path,
                                 int depth);

  // schema_combine.cpp: anyOf / oneOf (merged with sibling properties) and allOf.
  Result<std::string> visit_any_of(const Json& s, const char* kw, const std::string& path,
                                   int depth);
  static bool is_any(const Json& j);
  Result<std::optional<Json>> merge_object(const Json& outer, const Json& alt_in,
                                           const std::string& path);
  Result<std::string> visit_all_of(const Json& s, const std::string& path, int depth);

  // schema_object.cpp: properties, required, additionalProperties, min/maxProperties.
  Result<std::string> visit_object(const Json& s, const std::string& path, int depth);
  Result<std::string> build_object(const std::vector<std::pair<std::string, const Json*>>& props,
                                   const std::set<std::string>& required, const Json* additional,
                                   const std::string& path, int depth, uint64_t min_props = 0,
                                   uint64_t max_props = UINT64_MAX);
  Result<std::string> counted_object(const std::vector<std::string>& kvs,
                                     const std::vector<bool>& is_req, const std::string& extra,
                                     uint64_t min_props, uint64_t max_props,
                                     const std::string& path);

  // schema_array.cpp: items, prefixItems, min/maxItems, uniqueItems.
  Result<std::string> visit_array(const Json& s, const std::string& path, int depth);
  Result<std::string> visit_tuple(const Json& s, const Json& tuple, const Json* items,
                                  const std::string& path, int depth);
  Result<std::string> visit_unique_array(const Json& s, const std::string& path);

  // schema_scalar.cpp: strings (formats, lengths, patterns), integers, numbers.
  Result<std::string> visit_string(const Json& s, const std::string& path);
  Result<std::string> visit_integer(const Json& s, const std::string& path);
  Result<std::string> visit_multiple_of(const Json& mv, std::optional<int64_t> lo,
                                        std::optional<int64_t> hi, const std::string& path);
  Result<std::string> visit_number(const Json& s, const std::string& path);

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;  // $ref → the rule named after its target
};

}  // namespace minfer::grammar::schema
