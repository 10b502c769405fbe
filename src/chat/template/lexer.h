// Stage 5 (messages → text): template source → token stream, jinja2's lexer rules.
// Invariants: whitespace control ({%- -%} {{- -}} {#- -#}, `+` opt-outs), trim_blocks
// and lstrip_blocks give exactly the text jinja2 keeps; an end tag counts only when
// brackets are balanced; newlines are normalised and one trailing newline is dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace minfer::chat_template {

enum class TokKind : uint8_t {
  kText,        // literal template data, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // text holds the operator
  kEof,
};

struct Token {
  TokKind kind;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

struct LexOptions {
  bool trim_blocks = true;  // transformers enables both
  bool lstrip_blocks = true;
};

Result<std::vector<Token>> lex(std::string_view source, const LexOptions& opt = {});

}  // namespace minfer::chat_template
