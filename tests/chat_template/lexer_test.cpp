// Stage 5 tests: the lexer's whitespace control (-, +, trim_blocks, lstrip_blocks),
// comments, raw blocks, newline normalisation and string escapes, each against the text
// Python jinja2 produced for the same source.
#include "chat/template/lexer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chat/template/template.h"
#include "jinja_cases.h"

namespace minfer::chat_template {
namespace {

using jinja_cases::Case;
using jinja_cases::check_cases;

TEST(ChatTemplateLexer, whitespace_control_matches_jinja2) {
  check_cases({
      {"a\n  {% if t %}\n    x\n  {% endif %}\nb", "a\n    x\nb"},
      {"a  {%- if t -%}  x  {%- endif -%}  b", "axb"},
      {"a\n  {{ 1 }}\n  {{- 2 -}}\n  c", "a\n  12c"},
      {"  {%+ if t %}x{% endif +%}\ny", "  x\ny"},
      {"a {# comment #}\n b\n  {#- c2 -#}  c", "a  bc"},
      {"line1\n{% set x = 1 %}\nline2\n", "line1\nline2"},
      {"x {%- raw %} {{ not parsed }} {% endraw -%} y", "x {{ not parsed }} y"},
      {"{{ {'a': {'b': 1}} }}", "{'a': {'b': 1}}"},
      {"{{ 'a\\n\\tb\\u00e9\\x41' }}|{{ \"it's\" }}", "a\n\tbéA|it's"},
      {"a\r\nb\r\n{% if t %}\r\nc\r\n{% endif %}\r\n", "a\nb\nc\n"},
      {"   {% if t %}x{% endif %}   y", "x   y"},
      {"a{% if t %} {% endif %}b", "a b"},
      {"{% for i in xs %}\n  {{ i }}\n{% endfor %}", "  3\n  1\n  2\n"},
      {"x\n    {#- c #}\n    y", "x    y"},
  });
}

TEST(ChatTemplateLexer, end_tag_needs_balanced_brackets) {
  auto toks = lex("{{ {'a': 1} }}");
  ASSERT_TRUE(toks.ok());
  // {{, {, 'a', :, 1, }, }}, eof
  ASSERT_EQ(toks.value().size(), 8u);
  EXPECT_EQ(toks.value()[5].kind, TokKind::kOp);
  EXPECT_EQ(toks.value()[6].kind, TokKind::kVarEnd);
}

TEST(ChatTemplateLexer, errors_name_the_line) {
  auto toks = lex("a\nb {{ 'open");
  ASSERT_FALSE(toks.ok());
  EXPECT_NE(toks.error().message.find("line 2"), std::string::npos) << toks.error().message;
  EXPECT_FALSE(lex("{# never closed").ok());
}

}  // namespace
}  // namespace minfer::chat_template
