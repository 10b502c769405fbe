// Stage 14b: GBNF for JSON numbers within bounds (schema_internal.h). Bounds become
// exact decimals (fixed point, 20 fraction digits, rounded inward); an exclusive bound
// becomes an inclusive one a little inside it, far enough that no accepted number can
// round (as a double) onto the bound. The grammar is then exact for inclusive decimal
// bounds: integer part by digit ranges, fraction digit by digit against the bound's
// digits. Numbers come without exponent; fractions are capped in length.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/schema_internal.h"

namespace minfer::grammar::schema {
namespace {

// value * 10^kScaleDigits; |value| <= 1e15 needs 35 digits, past int64 (GCC and Clang have it).
__extension__ typedef __int128 Fixed;
constexpr int kScaleDigits = 20;
constexpr double kMaxBound = 1e15;
constexpr int kMaxFracDigits = 15;  // free fraction digits after the bound's own

Fixed pow10(int n) {
  Fixed v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

// The decimal text of a JSON number → Fixed, rounded up (`up`) or down when it has
// more than kScaleDigits fraction digits.
Result<Fixed> parse_fixed(const std::string& text, bool up) {
  size_t i = 0;
  const bool neg = i < text.size() && text[i] == '-';
  if (neg) ++i;
  std::string digits;
  int exp10 = 0;
  bool dot = false;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.');
       ++i) {
    if (text[i] == '.') {
      dot = true;
    } else {
      digits += text[i];
      if (dot) --exp10;
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    try {
      exp10 += std::stoi(text.substr(i + 1));
    } catch (...) {
      return make_error("bad number '" + text + "'");
    }
  }
  const size_t first = digits.find_first_not_of('0');
  digits = first == std::string::npos ? "0" : digits.substr(first);
  if (digits.size() > 30) return make_error("number '" + text + "' has too many digits");
  Fixed m = 0;
  for (char c : digits) m = m * 10 + (c - '0');
  const int shift = exp10 + kScaleDigits;
  Fixed v;
  if (shift >= 0) {
    v = m * pow10(shift);
  } else {
    const Fixed div = -shift > 38 ? 0 : pow10(-shift);
    const Fixed q = div == 0 ? 0 : m / div;
    const bool exact = div != 0 && q * div == m;
    // Round the magnitude toward the wanted direction of the signed value.
    const bool away = neg ? !up : up;
    v = q + (!exact && away ? 1 : 0);
  }
  return neg ? -v : v;
}

// 10^-p (as Fixed) with 10^-p >= 4 ulp of doubles near `bound`: a number at least
// that far inside the bound never rounds onto it.
Fixed safe_step(double bound) {
  const double a = std::max(std::fabs(bound), 1.0);
  const double ulp = std::nextafter(a, std::numeric_limits<double>::infinity()) - a;
  int p = static_cast<int>(std::floor(-std::log10(4 * ulp)));
  p = std::clamp(p, 0, kMaxFracDigits);
  return pow10(kScaleDigits - p);
}

// A GBNF literal of the integer v >= 0 (appended piecewise: GCC 12's -Wrestrict
// misfires on "\"" + std::to_string(...)).
std::string int_literal(Fixed v) {
  std::string out = "\"";
  out += std::to_string(static_cast<int64_t>(v));
  out += '"';
  return out;
}

// Fraction digits of a nonnegative Fixed, trailing zeros dropped ("" for none).
std::string frac_digits(Fixed v) {
  const Fixed f = v % pow10(kScaleDigits);
  std::string s(kScaleDigits, '0');
  Fixed x = f;
  for (int i = kScaleDigits - 1; i >= 0; --i) {
    s[static_cast<size_t>(i)] = static_cast<char>('0' + static_cast<int>(x % 10));
    x /= 10;
  }
  const size_t last = s.find_last_not_of('0');
  return last == std::string::npos ? "" : s.substr(0, last + 1);
}

// Digit strings D after the point with lower <= 0.D <= upper: `lower`/`upper` are the
// bound's remaining digits, nullopt once the bound no longer constrains.
struct FracState {
  std::optional<std::string> lower, upper;
  bool operator<(const FracState& o) const {
    return std::tie(lower, upper) < std::tie(o.lower, o.upper);
  }
  bool operator==(const FracState& o) const = default;
};

class Fraction {
 public:
  // Digit strings, possibly empty; nullopt when none satisfies.
  std::optional<std::string> any(const FracState& s) {
    const bool empty_ok = !s.lower;  // 0.(nothing) = 0 <= any upper
    auto ne = nonempty(s);
    if (!ne) return empty_ok ? std::optional<std::string>("\"\"") : std::nullopt;
    return empty_ok ? "(" + *ne + ")?" : *ne;
  }

  // The suffix after the integer part: "" and/or "." digits.
  std::optional<std::string> suffix(const FracState& s) {
    const bool empty_ok = !s.lower;
    auto ne = nonempty(s);
    if (!ne) return empty_ok ? std::optional<std::string>("") : std::nullopt;
    const std::string dotted = "\".\" " + *ne;
    return empty_ok ? "(" + dotted + ")?" : dotted;
  }

 private:
  std::optional<std::string> nonempty(const FracState& s) {
    if (!s.lower && !s.upper) return "[0-9]{1," + std::to_string(kMaxFracDigits) + "}";
    if (!s.lower && *s.upper == "") {  // at the upper bound: only zeros may follow
      return "\"0\"{1," + std::to_string(kMaxFracDigits) + "}";
    }
    auto it = memo_.find(s);
    if (it != memo_.end()) return it->second;
    std::vector<std::pair<FracState, std::pair<int, int>>> groups;
    for (int d = 0; d <= 9; ++d) {
      FracState next;
      if (s.lower) {
        const int b = (*s.lower)[0] - '0';
        if (d < b) continue;
        if (d == b && s.lower->size() > 1) next.lower = s.lower->substr(1);
      }
      if (s.upper) {
        const int b = s.upper->empty() ? 0 : (*s.upper)[0] - '0';
        if (d > b) continue;
        if (d == b) next.upper = s.upper->empty() ? "" : s.upper->substr(1);
      }
      if (!groups.empty() && groups.back().first == next && groups.back().second.second == d - 1) {
        groups.back().second.second = d;
      } else {
        groups.push_back({next, {d, d}});
      }
    }
    std::vector<std::string> alts;
    for (const auto& [next, r] : groups) {
      auto rest = any(next);
      if (!rest) continue;
      std::string cls = "[";
      cls += static_cast<char>('0' + r.first);
      if (r.second != r.first) {
        cls += '-';
        cls += static_cast<char>('0' + r.second);
      }
      cls += ']';
      alts.push_back(*rest == "\"\"" ? cls : cls + " " + *rest);
    }
    std::optional<std::string> out;
    if (alts.size() == 1) out = alts[0];
    if (alts.size() > 1) {
      std::string j = "(";
      for (size_t i = 0; i < alts.size(); ++i) j += (i ? " | " : "") + alts[i];
      out = j + ")";
    }
    memo_[s] = out;
    return out;
  }

  std::map<FracState, std::optional<std::string>> memo_;
};

// Decimals m (no sign) with lo <= m <= hi (hi open when nullopt); lo >= 0.
std::vector<std::string> magnitude(Fixed lo, std::optional<Fixed> hi) {
  const Fixed scale = pow10(kScaleDigits);
  Fraction frac;
  std::vector<std::string> alts;
  auto add = [&](const std::string& int_part, const FracState& s) {
    auto suf = frac.suffix(s);
    if (suf) alts.push_back(suf->empty() ? int_part : int_part + " " + *suf);
  };
  auto opt = [](const std::string& f) {
    return f.empty() ? std::nullopt : std::optional<std::string>(f);
  };
  const Fixed lo_i = lo / scale;
  const std::optional<std::string> lo_f = opt(frac_digits(lo));
  if (hi && *hi / scale == lo_i) {
    add(int_literal(lo_i), FracState{lo_f, frac_digits(*hi)});
    return alts;
  }
  add(int_literal(lo_i), FracState{lo_f, std::nullopt});
  const std::optional<int64_t> mid_hi =
      hi ? std::optional<int64_t>(static_cast<int64_t>(*hi / scale) - 1) : std::nullopt;
  if (!mid_hi || *mid_hi >= static_cast<int64_t>(lo_i) + 1) {
    add(int_range(static_cast<int64_t>(lo_i) + 1, mid_hi), FracState{});
  }
  if (hi) add(int_literal(*hi / scale), FracState{std::nullopt, frac_digits(*hi)});
  return alts;
}

}  // namespace

Result<std::string> number_range(const std::optional<NumberBound>& lo,
                                 const std::optional<NumberBound>& hi) {
  std::optional<Fixed> l, h;
  for (const auto* b : {&lo, &hi}) {
    if (!*b) continue;
    if (!(std::fabs((*b)->value) <= kMaxBound)) {
      return make_error("bound " + (*b)->text + " beyond 1e15 is not supported");
    }
    const bool is_lo = b == &lo;
    MINFER_TRY(Fixed v, parse_fixed((*b)->text, is_lo));
    if ((*b)->exclusive) v += is_lo ? safe_step((*b)->value) : -safe_step((*b)->value);
    (is_lo ? l : h) = v;
  }
  if (l && h && *l > *h) return make_error("the range is empty");
  std::vector<std::string> alts;
  // Negative numbers -m: m >= max(-h, tiny) (no "-0"), m <= -l.
  if (!l || *l < 0) {
    const Fixed tiny = pow10(kScaleDigits - kMaxFracDigits);
    const Fixed m_lo = h && *h < 0 ? -*h : tiny;
    const std::optional<Fixed> m_hi = l ? std::optional<Fixed>(-*l) : std::nullopt;
    if (!m_hi || *m_hi >= m_lo) {
      for (const auto& a : magnitude(m_lo, m_hi)) alts.push_back("\"-\" " + a);
    }
  }
  if (!h || *h >= 0) {
    const Fixed m_lo = l && *l > 0 ? *l : 0;
    if (!h || *h >= m_lo) {
      for (const auto& a : magnitude(m_lo, h)) alts.push_back(a);
    }
  }
  if (alts.empty()) return make_error("no number with at most 15 fraction digits is in the range");
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + ("(" + alts[i] + ")");
  return out + ")";
}

}  // namespace minfer::grammar::schema
