// Stage 18 tests (the argument parser): spellings, values, repeats, `--`, `=` forms
// and the error texts, in-process on ArgParser. Bars: exact values and messages.
#include "args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace minfer::cli {
namespace {

struct Fixture {
  ArgParser p{"test"};
  int32_t n = 5;
  float temp = 0.8f;
  std::string model;
  std::vector<std::string> stops;
  bool flag = false;
  std::string fa = "unset";
  Fixture() {
    p.int_opt("-n,--n-predict", "N", "tokens", n, -1, 100);
    p.float_opt("--temp", "T", "temperature", temp, 0.0f, 10.0f);
    p.string_opt("-m,--model", "PATH", "model", model);
    p.option(
        "--stop,-r", "TEXT", "stop",
        [this](const std::string& v) -> Status {
          stops.push_back(v);
          return Ok{};
        },
        true);
    p.flag("-cnv,--conversation", "conversation", [this] { flag = true; });
    p.optional_value("-fa", {"on", "off"}, "flash", [this](const std::string& v) -> Status {
      fa = v;
      return Ok{};
    });
  }
  Result<ArgParser::Parsed> parse(std::vector<std::string> args) { return p.parse(args); }
};

TEST(ArgParser, SpellingsValuesAndPositionalsInAnyOrder) {
  Fixture f;
  auto r = f.parse({"model.gguf", "-n", "7", "--temp=0.5", "-cnv", "hello", "-m", "x"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(f.n, 7);
  EXPECT_FLOAT_EQ(f.temp, 0.5f);
  EXPECT_TRUE(f.flag);
  EXPECT_EQ(f.model, "x");
  EXPECT_EQ(r->positionals, (std::vector<std::string>{"model.gguf", "hello"}));
  EXPECT_EQ(r->seen, (std::vector<std::string>{"-n", "--temp", "-cnv", "-m"}));
}

TEST(ArgParser, LastValueWinsRepeatableFlagsAddUp) {
  Fixture f;
  ASSERT_TRUE(f.parse({"-n", "1", "--n-predict", "2", "--stop", "a", "-r", "b"}).ok());
  EXPECT_EQ(f.n, 2);
  EXPECT_EQ(f.stops, (std::vector<std::string>{"a", "b"}));
}

TEST(ArgParser, ValuesMayLookLikeFlagsAndDoubleDashEndsFlags) {
  Fixture f;
  auto r = f.parse({"-n", "-1", "--stop", "--x", "--", "-n", "--temp"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(f.n, -1);
  EXPECT_EQ(f.stops, (std::vector<std::string>{"--x"}));
  EXPECT_EQ(r->positionals, (std::vector<std::string>{"-n", "--temp"}));
}

TEST(ArgParser, OptionalValueTakesOnlyItsChoices) {
  Fixture f;
  auto r = f.parse({"-fa", "prompt"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(f.fa, "");
  EXPECT_EQ(r->positionals, (std::vector<std::string>{"prompt"}));
  ASSERT_TRUE(f.parse({"-fa", "on"}).ok());
  EXPECT_EQ(f.fa, "on");
}

TEST(ArgParser, ErrorsNameTheFlagAndTheValue) {
  auto msg = [](std::vector<std::string> args) {
    Fixture f;
    auto r = f.parse(std::move(args));
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(msg({"-ngl", "99"}), "unknown flag '-ngl' (minfer --help lists the flags)");
  EXPECT_EQ(msg({"--bogus=3"}), "unknown flag '--bogus' (minfer --help lists the flags)");
  EXPECT_EQ(msg({"-n"}), "-n needs a value (N)");
  EXPECT_EQ(msg({"-n", "abc"}), "-n: 'abc' is not an integer");
  EXPECT_EQ(msg({"-n", "7x"}), "-n: '7x' is not an integer");
  EXPECT_EQ(msg({"-n", "-5"}), "-n: -5 is out of range [-1, 100]");
  EXPECT_EQ(msg({"-n", "99999999999999999999"}),
            "-n: 99999999999999999999 is out of range [-1, 100]");
  EXPECT_EQ(msg({"--temp", "nan"}), "--temp: 'nan' is not a number");
  EXPECT_EQ(msg({"--temp", "11"}), "--temp: 11 is out of range [0, 10]");
  EXPECT_EQ(msg({"-cnv=1"}), "unknown flag '-cnv=1' (minfer --help lists the flags)");
  EXPECT_EQ(msg({"--conversation=1"}), "--conversation takes no value");
}

TEST(ArgParser, HelpListsEveryNameAndMarksRepeatables) {
  Fixture f;
  const std::string h = f.p.help();
  EXPECT_NE(h.find("  -n, --n-predict N"), std::string::npos) << h;
  EXPECT_NE(h.find("--stop, -r TEXT"), std::string::npos) << h;
  EXPECT_NE(h.find("stop (repeatable)"), std::string::npos) << h;
  EXPECT_NE(h.find("-fa [on|off]"), std::string::npos) << h;
  EXPECT_NE(h.find("-h, --help"), std::string::npos) << h;
}

TEST(ParseNumbers, WholeTextAndRange) {
  EXPECT_EQ(*parse_int("42", "x", 0, 100), 42);
  EXPECT_FALSE(parse_int("", "x", 0, 100).ok());
  EXPECT_FALSE(parse_int(" 1", "x", 0, 100).ok());
  EXPECT_EQ(*parse_u64("18446744073709551615", "s"), UINT64_MAX);
  EXPECT_FALSE(parse_u64("18446744073709551616", "s").ok());
  EXPECT_FALSE(parse_u64("-1", "s").ok());
  EXPECT_FLOAT_EQ(*parse_float("+0.25", "t", 0.0f, 1.0f), 0.25f);
  EXPECT_FALSE(parse_float("1e39", "t", -1e30f, 1e30f).ok());
  EXPECT_FALSE(parse_float("0.5x", "t", 0.0f, 1.0f).ok());
}

}  // namespace
}  // namespace minfer::cli
