// Stage 14b (internal): pieces of the JSON Schema converter that build GBNF
// expressions: literals, JSON string characters, anchored regex patterns, integer
// ranges and keys that differ from a given set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "grammar/grammar.h"

namespace minfer::grammar::schema {

// A GBNF string literal matching exactly `bytes` (UTF-8 kept raw).
std::string literal(std::string_view bytes);
// A GBNF expression for one JSON-string character whose decoded value is in `set`,
// written as JSON writes it (raw, or \" \\ \b \f \n \r \t \u00XX for the others).
std::string json_char_in(const CharClass& set);
// A GBNF expression for the content of a JSON string (without quotes) matched by an
// anchored regular expression `^...$`, and the lengths (in characters) of the strings
// it matches (max_len UINT64_MAX: unbounded).
struct Pattern {
  std::string expr;
  uint64_t min_len = 0, max_len = 0;
};
Result<Pattern> pattern_to_gbnf(std::string_view pattern);
// A GBNF expression for the decimal integers in [lo, hi] (either side open), written
// without leading zeros and with at most kMaxIntDigits digits.
constexpr int kMaxIntDigits = 16;
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
// A GBNF expression for the JSON numbers (no exponent) between optional bounds, each
// given as the bound's JSON text and its double value; inclusive or exclusive. Every
// number it accepts is within the bounds, also after rounding to a double; bounds are
// limited to |b| <= 1e15 (schema_number.cpp).
struct NumberBound {
  double value = 0;
  std::string text;
  bool exclusive = false;
};
Result<std::string> number_range(const std::optional<NumberBound>& lo,
                                 const std::optional<NumberBound>& hi);
// A GBNF expression for a JSON string (quotes included) that is none of `keys`.
std::string string_not_in(const std::vector<std::string>& keys);

}  // namespace minfer::grammar::schema
