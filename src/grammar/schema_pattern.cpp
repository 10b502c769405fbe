// Stage 14b: GBNF expressions for the JSON Schema converter (schema_internal.h).
// Integer ranges use the classic digit-by-digit decomposition (as regex range
// generators do): per length, a common prefix, then one branch above the low bound's
// digit, one strictly between, one below the high bound's digit.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "core/json_escape.h"
#include "core/utf8.h"
#include "grammar/grammar_builder.h"
#include "grammar/schema_internal.h"

namespace minfer::grammar::schema {
namespace {

void append_escaped_cp(std::string& out, uint32_t cp, bool in_class) {
  char buf[16];
  if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '['))) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (in_class && (cp == '-' || cp == '^')) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    out += buf;
  } else if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    out += buf;
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    out += buf;
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    out += buf;
  }
}

std::string class_expr(const CharClass& c) {
  std::string out = "[";
  for (const auto& [lo, hi] : c.ranges) {
    append_escaped_cp(out, lo, true);
    if (hi != lo) {
      out += '-';
      append_escaped_cp(out, hi, true);
    }
  }
  return out + "]";
}

// ---- anchored regex patterns --------------------------------------------------------

class Regex {
 public:
  explicit Regex(std::string_view p) : p_(p) {}

  // Lengths (in characters) of the strings the whole pattern matches; kUnbounded for
  // no upper limit. Valid after run().
  static constexpr uint64_t kUnbounded = UINT64_MAX;
  uint64_t min_len() const { return len_.first; }
  uint64_t max_len() const { return len_.second; }

  Result<std::string> run() {
    if (p_.empty() || p_.front() != '^' || p_.back() != '$' || p_.size() < 2 ||
        (p_.size() >= 3 && p_[p_.size() - 2] == '\\')) {
      return make_error("pattern '" + std::string(p_) +
                        "' must be anchored as ^...$ (unanchored search is not supported)");
    }
    pos_ = 1;
    end_ = p_.size() - 1;
    MINFER_TRY(std::string e, alternation(0));
    if (pos_ != end_) return fail("unbalanced ')'");
    len_ = last_len_;
    return e;
  }

 private:
  Error fail(const std::string& what) const {
    return make_error("pattern '" + std::string(p_) + "': " + what + " at offset " +
                      std::to_string(pos_));
  }
  bool at_end() const { return pos_ >= end_; }

  Result<std::string> alternation(int depth) {
    if (depth > 64) return fail("groups nested too deeply");
    std::vector<std::string> alts;
    Len len{kUnbounded, 0};
    while (true) {
      MINFER_TRY(std::string s, sequence(depth));
      len = {std::min(len.first, last_len_.first), std::max(len.second, last_len_.second)};
      alts.push_back(s.empty() ? "\"\"" : s);
      if (!at_end() && p_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    last_len_ = len;
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  Result<std::string> sequence(int depth) {
    std::string out;
    Len len{0, 0};
    while (!at_end() && p_[pos_] != '|' && p_[pos_] != ')') {
      MINFER_TRY(std::string atom, this->atom(depth));
      const Len a = last_len_;
      q_min_ = q_max_ = 1;
      MINFER_TRY(std::string q, quantifier());
      len = {add(len.first, mul(a.first, q_min_)), add(len.second, mul(a.second, q_max_))};
      if (!out.empty()) out += ' ';
      out += q.empty() ? atom : "(" + atom + ")" + q;
    }
    last_len_ = len;
    return out;
  }

  using Len = std::pair<uint64_t, uint64_t>;
  static uint64_t add(uint64_t a, uint64_t b) {
    return a == kUnbounded || b == kUnbounded ? kUnbounded : a + b;
  }
  static uint64_t mul(uint64_t a, uint64_t b) {
    if (a == 0 || b == 0) return 0;
    return a == kUnbounded || b == kUnbounded ? kUnbounded : a * b;
  }

  Result<std::string> quantifier() {
    if (at_end()) return std::string();
    const char c = p_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      q_min_ = c == '+' ? 1 : 0;
      q_max_ = c == '?' ? 1 : kUnbounded;
      ++pos_;
    } else if (c == '{') {
      const size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos || close >= end_) return fail("unbalanced '{'");
      const std::string_view body = p_.substr(pos_ + 1, close - pos_ - 1);
      if (body.empty() || body.find_first_not_of("0123456789,") != std::string_view::npos ||
          body.front() == ',' || std::count(body.begin(), body.end(), ',') > 1) {
        return fail("bad quantifier '{" + std::string(body) + "}'");
      }
      // m, n (or m, or m,) within the grammar's repetition limit and in order.
      const size_t comma = body.find(',');
      const std::string_view sm = body.substr(0, comma);
      const std::string_view sn = comma == std::string_view::npos ? sm : body.substr(comma + 1);
      if (sm.size() > 5 || sn.size() > 5) return fail("quantifier count too large");
      const uint32_t m = static_cast<uint32_t>(std::stoul(std::string(sm)));
      const bool open = sn.empty();
      const uint32_t n = open ? m : static_cast<uint32_t>(std::stoul(std::string(sn)));
      if (m > kMaxRepetition || n > kMaxRepetition) {
        return fail("quantifier count larger than " + std::to_string(kMaxRepetition));
      }
      if (n < m) return fail("quantifier {m,n} with n < m");
      q = "{" + std::string(body) + "}";
      q_min_ = m;
      q_max_ = open && comma != std::string_view::npos ? kUnbounded : n;
      pos_ = close + 1;
    } else {
      return std::string();
    }
    if (!at_end() && (p_[pos_] == '?' || p_[pos_] == '+')) {
      if (p_[pos_] == '+') return fail("possessive quantifiers are not supported");
      ++pos_;  // lazy: the same language
    }
    return q;
  }

  Result<uint32_t> utf8_cp() {
    size_t len = 0;
    uint32_t v = 0;
    if (utf8::scan(reinterpret_cast<const unsigned char*>(p_.data()) + pos_, end_ - pos_, len, v) !=
        utf8::Scan::kValid) {
      return fail("invalid UTF-8");
    }
    pos_ += len;
    return v;
  }

  // A class escape (\d \w \s and their negations) or a literal escape.
  Result<CharClass> escape() {
    ++pos_;  // the backslash
    if (at_end()) return fail("'\\' at the end");
    const char e = p_[pos_++];
    using R = std::vector<std::pair<uint32_t, uint32_t>>;
    switch (e) {
      case 'd':
        return make_class(R{{'0', '9'}}, false);
      case 'D':
        return make_class(R{{'0', '9'}}, true);
      case 'w':
        return make_class(R{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, false);
      case 'W':
        return make_class(R{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, true);
      case 's':
        return make_class(R{{'\t', '\r'}, {' ', ' '}}, false);
      case 'S':
        return make_class(R{{'\t', '\r'}, {' ', ' '}}, true);
      case 'n':
        return CharClass{{{'\n', '\n'}}};
      case 'r':
        return CharClass{{{'\r', '\r'}}};
      case 't':
        return CharClass{{{'\t', '\t'}}};
      case 'f':
        return CharClass{{{'\f', '\f'}}};
      case 'v':
        return CharClass{{{'\v', '\v'}}};
      default:
        break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
      --pos_;
      return fail(std::string("unsupported escape '\\") + e + "'");
    }
    const auto cp = static_cast<uint32_t>(static_cast<unsigned char>(e));
    return CharClass{{{cp, cp}}};
  }

  Result<std::string> bracket() {
    ++pos_;  // '['
    bool negated = false;
    if (!at_end() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool first = true;
    while (true) {
      if (at_end()) return fail("unterminated '['");
      if (p_[pos_] == ']' && !first) break;
      first = false;
      CharClass item;
      if (p_[pos_] == '\\') {
        MINFER_TRY(item, escape());
      } else {
        MINFER_TRY(const uint32_t cp, utf8_cp());
        item = CharClass{{{cp, cp}}};
      }
      if (item.ranges.size() == 1 && item.ranges[0].first == item.ranges[0].second &&
          pos_ + 1 < end_ && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        if (p_[pos_] == '\\') {
          MINFER_TRY(CharClass h, escape());
          if (h.ranges.size() != 1 || h.ranges[0].first != h.ranges[0].second) {
            return fail("a class escape cannot end a range");
          }
          hi = h.ranges[0].first;
        } else {
          MINFER_TRY(hi, utf8_cp());
        }
        if (hi < item.ranges[0].first) return fail("character range out of order");
        ranges.emplace_back(item.ranges[0].first, hi);
      } else {
        ranges.insert(ranges.end(), item.ranges.begin(), item.ranges.end());
      }
    }
    ++pos_;  // ']'
    return json_char_in(make_class(std::move(ranges), negated));
  }

  Result<std::string> atom(int depth) {
    const char c = p_[pos_];
    last_len_ = {1, 1};  // one character, unless a group sets its own
    if (c == '(') {
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (!at_end() && p_[pos_] == '?') {
        return fail("lookaround and named groups are not supported");
      }
      MINFER_TRY(std::string inner, alternation(depth + 1));
      if (at_end() || p_[pos_] != ')') return fail("unbalanced '('");
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') return bracket();
    if (c == '.') {
      ++pos_;
      return json_char_in(make_class({{'\n', '\n'}, {'\r', '\r'}}, true));
    }
    if (c == '\\') {
      if (pos_ + 1 < end_ && p_[pos_ + 1] >= '1' && p_[pos_ + 1] <= '9') {
        return fail("backreferences are not supported");
      }
      if (pos_ + 1 < end_ && (p_[pos_ + 1] == 'b' || p_[pos_ + 1] == 'B')) {
        return fail("word boundaries are not supported");
      }
      MINFER_TRY(CharClass cls, escape());
      return json_char_in(cls);
    }
    if (c == '^' || c == '$') return fail("anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("nothing to repeat");
    MINFER_TRY(const uint32_t cp, utf8_cp());
    return json_char_in(CharClass{{{cp, cp}}});
  }

  std::string_view p_;
  size_t pos_ = 0, end_ = 0;
  Len last_len_{0, 0};  // of the item parsed last
  Len len_{0, 0};
  uint64_t q_min_ = 1, q_max_ = 1;  // of the quantifier parsed last
};

// ---- integer ranges -----------------------------------------------------------------

std::string digit_class(int lo, int hi) {
  std::string out;
  if (lo == hi) {
    out = "\"0\"";
    out[1] = static_cast<char>('0' + lo);
  } else {
    out = "[0-0]";
    out[1] = static_cast<char>('0' + lo);
    out[3] = static_cast<char>('0' + hi);
  }
  return out;
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

std::string join(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string seq(const std::string& a, const std::string& b) {
  if (a.empty()) return b.empty() ? "\"\"" : b;
  if (b.empty()) return a;
  return a + " " + b;
}

// Digit strings of length |s| that are >= s (le: <= s); leading zeros allowed.
std::string suffix_bound(const std::string& s, bool ge) {
  if (s.empty()) return "";
  const int d = s[0] - '0';
  std::vector<std::string> alts;
  if (ge && d < 9) alts.push_back(seq(digit_class(d + 1, 9), any_digits(s.size() - 1)));
  if (!ge && d > 0) alts.push_back(seq(digit_class(0, d - 1), any_digits(s.size() - 1)));
  alts.push_back(seq(digit_class(d, d), suffix_bound(s.substr(1), ge)));
  return join(alts);
}

// Same-length digit strings in [a, b].
std::string same_length(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  const std::string prefix = i ? literal(a.substr(0, i)) : "";
  if (i == a.size()) return prefix;
  const int da = a[i] - '0', db = b[i] - '0';
  const size_t rest = a.size() - i - 1;
  std::vector<std::string> alts;
  alts.push_back(seq(digit_class(da, da), suffix_bound(a.substr(i + 1), true)));
  if (da + 1 <= db - 1) alts.push_back(seq(digit_class(da + 1, db - 1), any_digits(rest)));
  alts.push_back(seq(digit_class(db, db), suffix_bound(b.substr(i + 1), false)));
  return seq(prefix, join(alts));
}

// Non-negative integers in [lo, hi] as decimal text without leading zeros.
std::string nonneg_range(uint64_t lo, uint64_t hi) {
  std::vector<std::string> alts;
  const std::string slo = std::to_string(lo), shi = std::to_string(hi);
  for (size_t len = slo.size(); len <= shi.size(); ++len) {
    std::string a = slo;
    if (len != slo.size()) {
      a.assign(len, '0');
      a[0] = '1';
    }
    const std::string b = len == shi.size() ? shi : std::string(len, '9');
    alts.push_back(same_length(a, b));
  }
  return join(alts);
}

uint64_t max_digits_value() {
  uint64_t v = 1;
  for (int i = 0; i < kMaxIntDigits; ++i) v *= 10;
  return v - 1;
}

}  // namespace

std::string literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_char_in(const CharClass& set) {
  std::vector<std::pair<uint32_t, uint32_t>> raw;
  std::vector<std::string> alts;
  for (const auto& [lo, hi] : set.ranges) {
    // Split off what JSON must escape: controls, '"' and '\'.
    uint32_t a = lo;
    while (a <= hi) {
      if (json_must_escape(a)) {
        std::string escaped;
        append_json_escape(escaped, a);
        alts.push_back(literal(escaped));
        ++a;
        continue;
      }
      uint32_t b = hi;
      if (a < '"' && b >= '"')
        b = '"' - 1;
      else if (a < '\\' && b >= '\\')
        b = '\\' - 1;
      raw.emplace_back(a, b);
      a = b + 1;
      if (b == kMaxCodePoint) break;
    }
  }
  if (!raw.empty()) alts.insert(alts.begin(), class_expr(CharClass{raw}));
  if (alts.empty()) return "[]";
  return join(alts);
}

Result<Pattern> pattern_to_gbnf(std::string_view pattern) {
  Regex r(pattern);
  MINFER_TRY(std::string e, r.run());
  return Pattern{.expr = std::move(e), .min_len = r.min_len(), .max_len = r.max_len()};
}

std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const uint64_t kMax = max_digits_value();
  auto mag = [](int64_t v) {
    return v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  };
  std::vector<std::string> alts;
  // Negative part: -[a, b] in magnitudes.
  const bool neg_possible = !lo || *lo < 0;
  const bool pos_possible = !hi || *hi >= 0;
  if (neg_possible) {
    const uint64_t mag_lo = hi && *hi < 0 ? mag(*hi) : 1;
    const uint64_t mag_hi = lo ? std::min(mag(*lo), kMax) : kMax;
    if (mag_lo <= mag_hi) alts.push_back("\"-\" " + nonneg_range(mag_lo, mag_hi));
  }
  if (pos_possible) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    const uint64_t b = hi ? std::min(static_cast<uint64_t>(*hi), kMax) : kMax;
    if (a <= b) alts.push_back(nonneg_range(a, b));
  }
  if (alts.empty()) return "[]";
  return join(alts);
}

std::string string_not_in(const std::vector<std::string>& keys) {
  struct Node {
    std::map<uint32_t, std::unique_ptr<Node>> kids;
    bool end = false;
  };
  Node root;
  for (const auto& k : keys) {
    Node* n = &root;
    size_t i = 0;
    while (i < k.size()) {
      const auto c = static_cast<unsigned char>(k[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t j = 1; j < len && i + j < k.size(); ++j) v = (v << 6) | (k[i + j] & 0x3F);
      i += len;
      auto& kid = n->kids[v];
      if (!kid) kid = std::make_unique<Node>();
      n = kid.get();
    }
    n->end = true;
  }
  // At each node: follow a key's next character, or leave the keys with any other
  // character (then anything), or stop here if no key ends here.
  auto rec = [&](auto&& self, const Node& n) -> std::string {
    std::vector<std::string> alts;
    std::vector<std::pair<uint32_t, uint32_t>> used;
    for (const auto& [cp, kid] : n.kids) {
      alts.push_back(json_char_in(CharClass{{{cp, cp}}}) + " " + self(self, *kid));
      used.emplace_back(cp, cp);
    }
    alts.push_back(json_char_in(make_class(used, true)) + " char* \"\\\"\"");
    if (!n.end) alts.push_back("\"\\\"\"");
    return join(alts);
  };
  return "\"\\\"\" " + rec(rec, root);
}

}  // namespace minfer::grammar::schema
