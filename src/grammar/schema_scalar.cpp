// Stage 14b: JSON Schema → GBNF, the leaf types (schema_converter.h): strings (the
// formats as primitive rules, minLength / maxLength, anchored patterns with the lengths
// they imply), integers (ranges, multipleOf) and numbers (exact decimal bounds).
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/schema_converter.h"
#include "grammar/schema_internal.h"

namespace minfer::grammar::schema {

Result<std::string> Converter::visit_string(const Json& s, const std::string& path) {
  const bool has_len = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format")) {
    if (s.contains("pattern") || has_len) {
      return make_error("JSON Schema: 'format' with 'pattern' or a length at " + path +
                        " is not supported");
    }
    const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
    static const std::set<std::string> kFormats = {"date", "time",     "date-time", "uuid",
                                                   "ipv4", "hostname", "email",     "uri"};
    if (!kFormats.count(f)) {
      return make_error("JSON Schema: unsupported format '" + f + "' at " + path +
                        " (supported: date, time, date-time, uuid, ipv4, hostname, email, uri)");
    }
    return add_rule(f + "-string", "\"\\\"\" " + use(f) + " \"\\\"\" " + use("ws"));
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string())
      return make_error("JSON Schema: pattern must be a string at " + path);
    MINFER_TRY(const Pattern p, pattern_to_gbnf(s["pattern"].get<std::string>()));
    if (has_len) {
      // Lengths beside a pattern: kept when every string the pattern matches already
      // has an allowed length (a grammar for the intersection is not built).
      MINFER_TRY(const uint64_t lo, count(s, "minLength", 0, path));
      MINFER_TRY(const uint64_t hi, count(s, "maxLength", UINT64_MAX, path));
      auto show = [](uint64_t v) {
        return v == UINT64_MAX ? std::string("inf") : std::to_string(v);
      };
      if (p.min_len < lo || p.max_len > hi) {
        return make_error("JSON Schema: minLength/maxLength with 'pattern' at " + path +
                          " is not supported unless every string the pattern matches fits (the "
                          "pattern's lengths are " +
                          show(p.min_len) + ".." + show(p.max_len) + ", the bounds " + show(lo) +
                          ".." + show(hi) + "; put the length in the pattern, e.g. {m,n})");
      }
    }
    return add_rule(path + "-pattern", "\"\\\"\" " + p.expr + " \"\\\"\" " + use("ws"));
  }
  if (has_len) {
    MINFER_TRY(const uint64_t lo, count(s, "minLength", 0, path));
    MINFER_TRY(const uint64_t hi, count(s, "maxLength", UINT64_MAX, path));
    if (hi < lo) return make_error("JSON Schema: maxLength < minLength at " + path);
    use("ws");
    return add_rule(path + "-string", "\"\\\"\" " + use("char") + repeat(lo, hi) + " \"\\\"\" ws");
  }
  return use("string");
}

Result<std::string> Converter::visit_integer(const Json& s, const std::string& path) {
  std::optional<int64_t> lo, hi;
  constexpr double kLimit = 1e17;
  for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(kw)) continue;
    const Json& v = s[kw];
    if (!v.is_number())
      return make_error(std::string("JSON Schema: ") + kw + " must be a number at " + path);
    const double d = v.get<double>();
    if (std::fabs(d) > kLimit) {
      return make_error(std::string("JSON Schema: ") + kw + " beyond 1e17 at " + path +
                        " is not supported");
    }
    const std::string k = kw;
    if (k == "minimum" || k == "exclusiveMinimum") {
      auto b = static_cast<int64_t>(k == "minimum" ? std::ceil(d) : std::floor(d) + 1);
      lo = lo ? std::max(*lo, b) : b;
    } else {
      auto b = static_cast<int64_t>(k == "maximum" ? std::floor(d) : std::ceil(d) - 1);
      hi = hi ? std::min(*hi, b) : b;
    }
  }
  if (lo && hi && *lo > *hi) return make_error("JSON Schema: empty integer range at " + path);
  if (s.contains("multipleOf")) return visit_multiple_of(s["multipleOf"], lo, hi, path);
  if (!lo && !hi) return use("integer");
  return add_rule(path + "-int", int_range(lo, hi) + " " + use("ws"));
}

// multipleOf m on an integer: a bounded range with few multiples lists them; m = 10^k
// is a range on the quotient followed by k zeros; unbounded, m in {2, 5} x 10^k is a
// last-digits rule. Everything else is refused.
Result<std::string> Converter::visit_multiple_of(const Json& mv, std::optional<int64_t> lo,
                                                 std::optional<int64_t> hi,
                                                 const std::string& path) {
  constexpr int64_t kMaxListed = 256;
  const std::string supported =
      " (supported on integer: any m with a minimum and a maximum spanning at most 256 "
      "multiples; m = 10^k with any bounds; m = 2 x 10^k or 5 x 10^k without bounds)";
  if (!mv.is_number() || !(mv.get<double>() > 0)) {
    return make_error("JSON Schema: multipleOf must be a number > 0 at " + path);
  }
  const double md = mv.get<double>();
  if (md != std::floor(md) || md > 1e16) {
    return make_error("JSON Schema: multipleOf " + mv.dump() + " at " + path + " is not supported" +
                      supported);
  }
  const auto m = static_cast<int64_t>(md);
  use("ws");
  // Quotient bounds: ceil(lo / m), floor(hi / m).
  auto div_floor = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); };
  std::optional<int64_t> q_lo, q_hi;
  if (lo) q_lo = -div_floor(-*lo, m);
  if (hi) q_hi = div_floor(*hi, m);
  if (q_lo && q_hi && *q_lo > *q_hi) {
    return make_error("JSON Schema: no multiple of " + mv.dump() + " in the range at " + path);
  }
  if (m == 1) {
    if (!lo && !hi) return use("integer");
    return add_rule(path + "-int", int_range(lo, hi) + " ws");
  }
  if (q_lo && q_hi && *q_hi - *q_lo < kMaxListed) {
    std::string out = "(";
    for (int64_t q = *q_lo; q <= *q_hi; ++q) {
      out += (q == *q_lo ? "\"" : " | \"") + std::to_string(q * m) + "\"";
    }
    return add_rule(path + "-multiple", out + ") ws");
  }
  int k = 0;
  int64_t d = m;
  while (d % 10 == 0) {
    d /= 10;
    ++k;
  }
  const std::string zeros = k ? " \"" + std::string(static_cast<size_t>(k), '0') + "\"" : "";
  if (d == 1) {
    std::vector<std::string> alts;
    if ((!q_lo || *q_lo <= 0) && (!q_hi || *q_hi >= 0)) alts.push_back("\"0\"");
    if (!q_hi || *q_hi >= 1) {
      alts.push_back(int_range(std::max<int64_t>(q_lo.value_or(1), 1), q_hi) + zeros);
    }
    if (!q_lo || *q_lo <= -1) {
      alts.push_back(int_range(q_lo, std::min<int64_t>(q_hi.value_or(-1), -1)) + zeros);
    }
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | (" : "(") + alts[i] + ")";
    return add_rule(path + "-multiple", out + ") ws");
  }
  if ((d == 2 || d == 5) && !lo && !hi) {
    const std::string last = d == 2 ? "[02468]" : "[05]";
    const std::string lead = d == 2 ? "[2468]" : "\"5\"";
    // A nonzero multiple: its last digit before the k zeros is in `last`; at most 16
    // digits in all, as the plain integer rule.
    const int free = std::max(0, 16 - k - 2);
    const std::string body = "\"0\" | \"-\"? (" + lead + " | [1-9] [0-9]{0," +
                             std::to_string(free) + "} " + last + ")" + zeros;
    return add_rule(path + "-multiple", "(" + body + ") ws");
  }
  return make_error("JSON Schema: multipleOf " + mv.dump() + " at " + path + " is not supported" +
                    supported);
}

// Bounds on a number: the tighter of minimum / exclusiveMinimum (and of the maxima)
// becomes an exact decimal range without exponent (schema::number_range).
Result<std::string> Converter::visit_number(const Json& s, const std::string& path) {
  if (s.contains("multipleOf")) {
    return make_error("JSON Schema: multipleOf on type number at " + path +
                      " is not supported (only on integer)");
  }
  std::optional<NumberBound> lo, hi;
  for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(kw)) continue;
    const Json& v = s[kw];
    if (!v.is_number())
      return make_error(std::string("JSON Schema: ") + kw + " must be a number at " + path);
    const std::string k = kw;
    const NumberBound b{
        .value = v.get<double>(), .text = v.dump(), .exclusive = k.rfind("exclusive", 0) == 0};
    const bool is_lo = k == "minimum" || k == "exclusiveMinimum";
    auto& slot = is_lo ? lo : hi;
    // The tighter bound wins; at equal values the exclusive one.
    if (!slot || (is_lo ? b.value > slot->value : b.value < slot->value) ||
        (b.value == slot->value && b.exclusive)) {
      slot = b;
    }
  }
  if (!lo && !hi) return use("number");
  auto range = number_range(lo, hi);
  if (!range.ok()) {
    return make_error("JSON Schema: number bounds at " + path + ": " + range.error().message);
  }
  return add_rule(path + "-num", *range + " " + use("ws"));
}

}  // namespace minfer::grammar::schema
