// Stage 14b tests: JSON Schema → GBNF on data-driven cases (llama.cpp's schema cases
// within scope, see data/README.md): documents the grammar must accept and reject,
// and unsupported schemas that must fail with an error naming the keyword.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar_test_util.h"

namespace minfer::grammar {
namespace {

using testing::read_cases;

bool full_match(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  auto m = Matcher::create(g);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() && m->accept(s) && m->can_end();
}

TEST(JsonSchema, CasesAcceptRejectAndErrors) {
  const auto cases = read_cases("json_schema_cases.txt");
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto gbnf = json_schema_to_gbnf(c.body);
    if (c.sections.count("error")) {
      ASSERT_FALSE(gbnf.ok()) << *gbnf;
      const std::string& want = c.sections.at("error").at(0);
      EXPECT_NE(gbnf.error().message.find(want), std::string::npos)
          << "got: " << gbnf.error().message << "\nwant: " << want;
      continue;
    }
    ASSERT_TRUE(gbnf.ok()) << gbnf.error().message;
    auto g = Grammar::parse(*gbnf);
    ASSERT_TRUE(g.ok()) << g.error().message << "\n" << *gbnf;
    for (const auto& s : c.sections.at("pass")) {
      EXPECT_TRUE(full_match(*g, s)) << "'" << s << "'\n" << *gbnf;
    }
    for (const auto& s : c.sections.at("fail")) {
      EXPECT_FALSE(full_match(*g, s)) << "'" << s << "'\n" << *gbnf;
    }
  }
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = Grammar::parse(json_object_gbnf());
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_TRUE(full_match(*g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(full_match(*g, "[1]"));
  EXPECT_FALSE(full_match(*g, "{\"a\": }"));
}

// Every integer range agrees with arithmetic, for bounds around digit-count edges.
TEST(JsonSchema, IntegerRangesMatchArithmetic) {
  const int64_t bounds[] = {-1001, -999, -100, -10, -9, -1, 0, 1, 9, 10, 99, 100, 101, 999, 1000};
  for (int64_t lo : bounds) {
    for (int64_t hi : bounds) {
      if (hi < lo) continue;
      const std::string schema = "{\"type\": \"integer\", \"minimum\": " + std::to_string(lo) +
                                 ", \"maximum\": " + std::to_string(hi) + "}";
      auto gbnf = json_schema_to_gbnf(schema);
      ASSERT_TRUE(gbnf.ok());
      auto g = Grammar::parse(*gbnf);
      ASSERT_TRUE(g.ok()) << g.error().message;
      for (int64_t v = -1100; v <= 1100; v += 7) {
        ASSERT_EQ(full_match(*g, std::to_string(v)), v >= lo && v <= hi)
            << "[" << lo << ", " << hi << "] value " << v;
      }
      for (int64_t v : {lo, hi, lo - 1, hi + 1}) {
        ASSERT_EQ(full_match(*g, std::to_string(v)), v >= lo && v <= hi)
            << "[" << lo << ", " << hi << "] value " << v;
      }
    }
  }
}

// Number bounds against double arithmetic: an accepted number is always within the
// bounds (as the double it parses to), and every number on the grid that is inside them
// (by more than 1e-9 from an exclusive bound) is accepted.
TEST(JsonSchema, NumberRangesAreSoundAndCompleteOnAGrid) {
  const char* bounds[] = {"-2.5", "-1", "-0.05", "0", "0.1", "0.25", "1", "2.75"};
  std::vector<std::string> values;
  for (int i = -320; i <= 320; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", i / 100.0);
    values.push_back(buf);
    std::snprintf(buf, sizeof buf, "%.3f", i / 100.0 + 0.001);
    values.push_back(buf);
  }
  for (const char* extra : {"0", "1", "-1", "2", "-3", "0.1000000001", "0.0999999999",
                            "0.250000000000001", "-2.500000000000001", "2.749999999999999"}) {
    values.push_back(extra);
  }
  for (const char* lo : bounds) {
    for (const char* hi : bounds) {
      for (int excl = 0; excl < 4; ++excl) {
        const double l = std::stod(lo), h = std::stod(hi);
        const bool lx = excl & 1, hx = excl & 2;
        if (l > h || (l == h && (lx || hx))) continue;
        const std::string schema = std::string("{\"type\": \"number\", \"") +
                                   (lx ? "exclusiveMinimum" : "minimum") + "\": " + lo + ", \"" +
                                   (hx ? "exclusiveMaximum" : "maximum") + "\": " + hi + "}";
        SCOPED_TRACE(schema);
        auto gbnf = json_schema_to_gbnf(schema);
        ASSERT_TRUE(gbnf.ok()) << gbnf.error().message;
        auto g = Grammar::parse(*gbnf);
        ASSERT_TRUE(g.ok()) << g.error().message;
        for (const auto& v : values) {
          const double x = std::stod(v);
          const bool inside = (lx ? x > l : x >= l) && (hx ? x < h : x <= h);
          const bool clearly = inside && (!lx || x - l > 1e-9) && (!hx || h - x > 1e-9);
          const bool got = full_match(*g, v);
          if (got) {
            ASSERT_TRUE(inside) << v << " accepted\n" << *gbnf;
          }
          if (clearly) {
            ASSERT_TRUE(got) << v << " rejected\n" << *gbnf;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace minfer::grammar
