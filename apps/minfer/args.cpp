// Stage 18 (CLI): the flag table parser (args.h).
#include "args.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "commands.h"

namespace minfer::cli {

Result<int64_t> parse_int(std::string_view text, std::string_view what, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || p != end || ec == std::errc::invalid_argument) {
    return make_error(fmt::format("{}: '{}' is not an integer", what, text));
  }
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    return make_error(fmt::format("{}: {} is out of range [{}, {}]", what, text, lo, hi));
  }
  return v;
}

Result<uint64_t> parse_u64(std::string_view text, std::string_view what) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || p != end || ec == std::errc::invalid_argument) {
    return make_error(fmt::format("{}: '{}' is not a non-negative integer", what, text));
  }
  if (ec == std::errc::result_out_of_range) {
    return make_error(fmt::format("{}: {} is out of range [0, {}]", what, text, UINT64_MAX));
  }
  return v;
}

Result<float> parse_float(std::string_view text, std::string_view what, float lo, float hi) {
  // strtof wants a terminated string; from_chars for floats needs GCC 11+ and
  // rejects a leading '+', which users type.
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const float v = std::strtof(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(v)) {
    return make_error(fmt::format("{}: '{}' is not a number", what, text));
  }
  if (errno == ERANGE || !(v >= lo && v <= hi)) {
    return make_error(fmt::format("{}: {} is out of range [{}, {}]", what, text, lo, hi));
  }
  return v;
}

ArgParser::ArgParser(std::string usage) : usage_(std::move(usage)) {}

void ArgParser::section(std::string title) {
  section_ = std::move(title);
}

void ArgParser::add(Spec spec) {
  spec.section = section_;
  for (const std::string& n : spec.names) {
    MINFER_CHECK(find(n) == nullptr, "flag %s registered twice", n.c_str());
  }
  specs_.push_back(std::move(spec));
}

namespace {
std::vector<std::string> split_names(std::string_view names) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    size_t comma = names.find(',', start);
    if (comma == std::string_view::npos) comma = names.size();
    out.emplace_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}
}  // namespace

void ArgParser::flag(std::string_view names, std::string help, std::function<void()> on) {
  add({.names = split_names(names), .help = std::move(help), .on = std::move(on)});
}

void ArgParser::option(std::string_view names, std::string metavar, std::string help, Setter set,
                       bool repeatable) {
  add({.names = split_names(names),
       .metavar = std::move(metavar),
       .help = std::move(help),
       .set = std::move(set),
       .repeatable = repeatable});
}

void ArgParser::optional_value(std::string_view names, std::vector<std::string> choices,
                               std::string help, Setter set) {
  std::string metavar = "[";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) metavar += '|';
    metavar += choices[i];
  }
  metavar += "]";
  add({.names = split_names(names),
       .metavar = std::move(metavar),
       .help = std::move(help),
       .set = std::move(set),
       .choices = std::move(choices),
       .optional = true});
}

void ArgParser::string_opt(std::string_view names, std::string metavar, std::string help,
                           std::string& target) {
  option(names, std::move(metavar), std::move(help), [&target](const std::string& v) -> Status {
    target = v;
    return Ok{};
  });
}

void ArgParser::int_opt(std::string_view names, std::string metavar, std::string help,
                        int32_t& target, int64_t lo, int64_t hi) {
  const std::string what = split_names(names).front();
  option(names, std::move(metavar), std::move(help),
         [&target, what, lo, hi](const std::string& v) -> Status {
           MINFER_TRY(const int64_t n, parse_int(v, what, lo, hi));
           target = static_cast<int32_t>(n);
           return Ok{};
         });
}

void ArgParser::float_opt(std::string_view names, std::string metavar, std::string help,
                          float& target, float lo, float hi) {
  const std::string what = split_names(names).front();
  option(names, std::move(metavar), std::move(help),
         [&target, what, lo, hi](const std::string& v) -> Status {
           MINFER_TRY(target, parse_float(v, what, lo, hi));
           return Ok{};
         });
}

const ArgParser::Spec* ArgParser::find(std::string_view name) const {
  for (const Spec& s : specs_) {
    for (const std::string& n : s.names) {
      if (n == name) return &s;
    }
  }
  return nullptr;
}

Result<ArgParser::Parsed> ArgParser::parse(const std::vector<std::string>& args) const {
  Parsed out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.positionals.insert(out.positionals.end(), args.begin() + static_cast<long>(i) + 1,
                             args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      out.positionals.push_back(a);
      continue;
    }
    if (a == "-h" || a == "--help") {
      out.help = true;
      continue;
    }
    std::string name = a;
    std::optional<std::string> inline_value;
    if (a.rfind("--", 0) == 0) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
    }
    const Spec* s = find(name);
    if (s == nullptr) {
      return make_error(fmt::format("unknown flag '{}' (minfer --help lists the flags)", name));
    }
    out.seen.push_back(s->names.front());
    if (s->metavar.empty()) {
      if (inline_value) return make_error(fmt::format("{} takes no value", name));
      s->on();
      continue;
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (s->optional) {
      if (i + 1 < args.size()) {
        for (const std::string& c : s->choices) {
          if (args[i + 1] == c) {
            value = args[++i];
            break;  // i moved: args[i + 1] may be past the end now (ASan found it)
          }
        }
      }
    } else {
      if (i + 1 >= args.size()) {
        return make_error(fmt::format("{} needs a value ({})", name, s->metavar));
      }
      value = args[++i];
    }
    if (auto st = s->set(value); !st.ok()) return st.error();
  }
  return out;
}

std::string ArgParser::help() const {
  std::string out = "usage: ";
  out += usage_;
  out += '\n';
  std::string section = "\x01";
  for (const Spec& s : specs_) {
    if (s.section != section) {
      section = s.section;
      out += '\n';
      out += section.empty() ? std::string_view("flags") : std::string_view(section);
      out += ":\n";
    }
    std::string left = "  ";
    for (size_t i = 0; i < s.names.size(); ++i) {
      if (i > 0) left += ", ";
      left += s.names[i];
    }
    if (!s.metavar.empty()) left += " " + s.metavar;
    constexpr size_t kColumn = 34;
    if (left.size() + 2 > kColumn) {
      out += left;
      out += '\n';
      out.append(kColumn, ' ');
    } else {
      out += left;
      out.append(kColumn - left.size(), ' ');
    }
    // Continuation lines of a multi-line help text line up with the column.
    for (char c : s.help) {
      out += c;
      if (c == '\n') out.append(kColumn, ' ');
    }
    if (s.repeatable) out += " (repeatable)";
    out += "\n";
  }
  out += "  -h, --help";
  out.append(34 - 12, ' ');
  out += "this help\n";
  return out;
}

std::optional<int> parse_or_help(const ArgParser& p, const std::vector<std::string>& args,
                                 ArgParser::Parsed& out) {
  auto parsed = p.parse(args);
  if (!parsed) return fail(parsed.error().message);
  if (parsed->help) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  out = std::move(*parsed);
  return std::nullopt;
}

std::optional<int> parse_model_command(const ArgParser& p, const std::vector<std::string>& args,
                                       const std::string& what, std::string& model_arg) {
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return done;
  if (parsed.positionals.size() > 1 || (!parsed.positionals.empty() && !model_arg.empty())) {
    return fail(what + ": one MODEL (positional or -m)");
  }
  if (!parsed.positionals.empty()) model_arg = parsed.positionals[0];
  return std::nullopt;
}

}  // namespace minfer::cli
