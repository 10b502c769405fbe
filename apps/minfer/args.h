// Stage 18 (CLI): the argument parser every subcommand uses — a table of flags, each
// with its spellings, value name, help line and a setter.
// Invariants: every usage error is a Status naming the flag and the value (the caller
// prints "minfer: error: ..." and exits 1); an unknown flag is always named; a flag
// given twice keeps the last value unless it is repeatable (the setter then appends);
// --help is built from the same table, so it lists exactly what parses.
// Written by hand rather than with CLI11 because llama.cpp's spellings need
// multi-letter single-dash flags (-ngl, -sys, -cnv, -ub), which CLI11 cannot name, and
// because CLI11's messages for unknown flags ("args: At Most 2 required but received
// 3") do not name the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace minfer::cli {

// Strict number parsing for flag values: the whole text must be the number, within
// [lo, hi]. `what` names the flag in the error ("-n: 'abc' is not an integer").
Result<int64_t> parse_int(std::string_view text, std::string_view what, int64_t lo, int64_t hi);
Result<uint64_t> parse_u64(std::string_view text, std::string_view what);
Result<float> parse_float(std::string_view text, std::string_view what, float lo, float hi);

class ArgParser {
 public:
  using Setter = std::function<Status(const std::string& value)>;

  // `usage`: the first help line ("minfer MODEL [PROMPT] [flags]").
  explicit ArgParser(std::string usage);

  // A help heading for the flags added after it.
  void section(std::string title);
  // `names`: comma-separated spellings, e.g. "-c,--ctx-size,--n-ctx".
  void flag(std::string_view names, std::string help, std::function<void()> on);
  // A flag with a value (`-n 5`, `--temp=0.5`); `metavar` is its name in the help.
  void option(std::string_view names, std::string metavar, std::string help, Setter set,
              bool repeatable = false);
  // A flag whose value is optional: it takes the next argument only when that is one
  // of `choices` (`-fa`, `-fa on`).
  void optional_value(std::string_view names, std::vector<std::string> choices, std::string help,
                      Setter set);

  // Typed shorthands: the value is parsed and range-checked into `target`.
  void string_opt(std::string_view names, std::string metavar, std::string help,
                  std::string& target);
  void int_opt(std::string_view names, std::string metavar, std::string help, int32_t& target,
               int64_t lo, int64_t hi);
  void float_opt(std::string_view names, std::string metavar, std::string help, float& target,
                 float lo, float hi);

  struct Parsed {
    std::vector<std::string> positionals;
    bool help = false;              // -h / --help was given
    std::vector<std::string> seen;  // the canonical (first) name of every flag given, in order
  };
  // Everything after `--` is positional. "-" alone is positional (stdin).
  Result<Parsed> parse(const std::vector<std::string>& args) const;

  std::string help() const;

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string metavar;  // empty: no value
    std::string help;
    Setter set;
    std::function<void()> on;
    std::vector<std::string> choices;  // optional_value
    bool repeatable = false;
    bool optional = false;
    std::string section;
  };
  const Spec* find(std::string_view name) const;
  void add(Spec spec);

  std::string usage_;
  std::string section_;
  std::vector<Spec> specs_;
};

// Parses `args` with `p` into `out`; prints the help for --help (exit code 0) and the
// usage error otherwise (exit 1). Returns the exit code to leave with, or nullopt.
std::optional<int> parse_or_help(const ArgParser& p, const std::vector<std::string>& args,
                                 ArgParser::Parsed& out);

// The common head of a subcommand that takes one MODEL (positional or -m): parses
// `args` with `p`, prints the help for --help (exit code 0), refuses a second model
// (a usage error, exit 1, "<what>: one MODEL ..."). Returns the exit code to leave with,
// or nullopt to go on with `model_arg` set (empty: the default model).
std::optional<int> parse_model_command(const ArgParser& p, const std::vector<std::string>& args,
                                       const std::string& what, std::string& model_arg);

}  // namespace minfer::cli
