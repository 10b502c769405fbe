// Stage 5 tests: the shared case runner of the lexer and expression tests — a template
// source, the text Python jinja2 (transformers' configuration) renders, or nullopt
// where jinja2 raises.
#pragma once

#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/template/template.h"

namespace minfer::chat_template::jinja_cases {

struct Case {
  const char* source;
  std::optional<std::string> expected;  // nullopt: jinja2 raises
};

// Variables shared by the cases; the expected texts were printed by Python jinja2 in
// transformers' configuration over these same values.
inline Result<std::string> render(const char* source) {
  auto t = Template::compile(source);
  if (!t.ok()) return t.error();
  auto vars = nlohmann::ordered_json::parse(
      R"({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "  Hello World  ",
      "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "n": null, "t": true})");
  return t->render_vars(vars, std::tm{});
}

inline void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    auto out = render(c.source);
    if (!c.expected) {
      EXPECT_FALSE(out.ok()) << c.source << "\n rendered: " << out.value();
      continue;
    }
    ASSERT_TRUE(out.ok()) << c.source << "\n error: " << out.error().message;
    EXPECT_EQ(*c.expected, out.value()) << c.source;
  }
}

}  // namespace minfer::chat_template::jinja_cases
