// Stage 14b: GBNF text → rules. The syntax is llama.cpp's (grammars/README.md): rules
// `name ::= alternatives`, sequences of literals, character classes, `.`, rule
// references and parenthesised groups, postfix `* + ? {m} {m,} {m,n}`, `#` comments.
// Groups and repetitions become generated rules (right recursive, so the matcher's
// stacks do not grow while it repeats). Every error names line:column.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/utf8.h"
#include "grammar/grammar_builder.h"

namespace minfer::grammar {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view src, Grammar::Builder& b) : src_(src), b_(b) {}

  Status parse() {
    while (true) {
      skip_space(true);
      if (eof()) break;
      MINFER_TRY_STATUS(parse_rule());
    }
    return Ok{};
  }

 private:
  bool eof() const { return pos_ >= src_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }

  Error err(size_t at, const std::string& msg) const {
    return make_error(b_.where(at) + ": " + msg);
  }

  // Spaces, tabs, carriage returns and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (!eof()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && src_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view parse_name() {
    const size_t start = pos_;
    while (!eof() && is_name_char(src_[pos_])) ++pos_;
    return src_.substr(start, pos_ - start);
  }

  Status parse_rule() {
    const size_t start = pos_;
    const std::string_view name = parse_name();
    if (name.empty()) {
      return err(start, std::string("expected a rule name, found '") + peek() + "'");
    }
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") {
      return err(pos_, "expected '::=' after rule name '" + std::string(name) + "'");
    }
    pos_ += 3;
    MINFER_TRY(const uint32_t id, b_.define(std::string(name), start));
    skip_space(true);
    std::vector<Elem> body;
    MINFER_TRY_STATUS(parse_alternates(id, false, 0, body));
    b_.set_body(id, std::move(body));
    skip_space(false);
    if (!eof() && peek() != '\n') {
      return err(pos_, std::string("expected the end of rule '") + std::string(name) +
                           "' (a newline), found '" + peek() + "'");
    }
    return Ok{};
  }

  Status parse_alternates(uint32_t rule, bool nested, uint32_t depth, std::vector<Elem>& body) {
    MINFER_TRY_STATUS(parse_sequence(rule, nested, depth, body));
    while (true) {
      skip_space(nested);
      if (peek() == '\n' && !nested) {
        // An alternative may continue on the next line when that line starts with '|'.
        const size_t save = pos_;
        skip_space(true);
        if (peek() != '|') {
          pos_ = save;
          break;
        }
      }
      if (peek() != '|') break;
      ++pos_;
      skip_space(true);
      body.push_back({ElemKind::kAlt, 0});
      MINFER_TRY_STATUS(parse_sequence(rule, nested, depth, body));
    }
    body.push_back({ElemKind::kEnd, 0});
    return Ok{};
  }

  // One character of a literal or class: raw UTF-8 or an escape. The escape set is
  // llama.cpp's parse_char (src/llama-grammar.cpp): \x.. \u.... \U........ \t \n \r
  // and the quoted \\ \" \[ \] \- ; the same set in literals and in classes.
  Result<uint32_t> parse_char() {
    const size_t start = pos_;
    const auto c = static_cast<unsigned char>(src_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= src_.size()) return err(start, "bad escape: '\\' at the end of the text");
      const char e = src_[pos_ + 1];
      pos_ += 2;
      int n_hex = 0;
      switch (e) {
        case 'x':
          n_hex = 2;
          break;
        case 'u':
          n_hex = 4;
          break;
        case 'U':
          n_hex = 8;
          break;
        case 't':
          return uint32_t{'\t'};
        case 'n':
          return uint32_t{'\n'};
        case 'r':
          return uint32_t{'\r'};
        case '\\':
          return uint32_t{'\\'};
        case '"':
          return uint32_t{'"'};
        case '[':
          return uint32_t{'['};
        case ']':
          return uint32_t{']'};
        case '-':
          return uint32_t{'-'};
        default:
          return err(start, std::string("bad escape '\\") + e +
                                "' (known: \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\] \\-)");
      }
      uint32_t v = 0;
      for (int i = 0; i < n_hex; ++i) {
        const int h = hex_value(peek());
        if (h < 0) {
          return err(start, std::string("bad escape '\\") + e + "': expected " +
                                std::to_string(n_hex) + " hex digits");
        }
        v = (v << 4) | static_cast<uint32_t>(h);
        ++pos_;
      }
      if (v > kMaxCodePoint) return err(start, "bad escape: code point past U+10FFFF");
      return v;
    }
    // Raw UTF-8 (strict: no overlongs, surrogates or code points past U+10FFFF).
    size_t len = 0;
    uint32_t v = 0;
    if (utf8::scan(reinterpret_cast<const unsigned char*>(src_.data()) + pos_, src_.size() - pos_,
                   len, v) != utf8::Scan::kValid) {
      return err(start, "invalid UTF-8 in the grammar text");
    }
    pos_ += len;
    return v;
  }

  Status parse_literal(std::vector<Elem>& out) {
    const size_t open = pos_++;
    while (true) {
      if (eof()) return err(open, "unterminated string literal (missing '\"')");
      if (peek() == '"') break;
      MINFER_TRY(const uint32_t cp, parse_char());
      out.push_back({ElemKind::kChars, b_.add_class(CharClass{{{cp, cp}}})});
    }
    ++pos_;
    return Ok{};
  }

  Status parse_class(std::vector<Elem>& out) {
    const size_t open = pos_++;
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (eof()) return err(open, "unterminated character class (missing ']')");
      if (peek() == ']') break;
      MINFER_TRY(const uint32_t lo, parse_char());
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
        ++pos_;
        const size_t at = pos_;
        MINFER_TRY(hi, parse_char());
        if (hi < lo) return err(at, "character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    out.push_back({ElemKind::kChars, b_.add_class(make_class(std::move(ranges), negated))});
    return Ok{};
  }

  Status parse_sequence(uint32_t rule, bool nested, uint32_t depth, std::vector<Elem>& out) {
    size_t last_start = out.size();
    bool have_item = false;
    while (true) {
      skip_space(nested);
      if (eof()) return Ok{};
      const char c = peek();
      const size_t at = pos_;
      if (c == '"') {
        last_start = out.size();
        MINFER_TRY_STATUS(parse_literal(out));
        have_item = true;
      } else if (c == '[') {
        last_start = out.size();
        MINFER_TRY_STATUS(parse_class(out));
        have_item = true;
      } else if (c == '.') {
        ++pos_;
        last_start = out.size();
        out.push_back({ElemKind::kChars, b_.add_class(CharClass{{{0, kMaxCodePoint}}})});
        have_item = true;
      } else if (is_name_char(c)) {
        const std::string_view name = parse_name();
        const size_t after = pos_;
        skip_space(nested);
        if (src_.substr(pos_, 3) == "::=") {
          return err(
              at, "expected a newline before the definition of rule '" + std::string(name) + "'");
        }
        pos_ = after;
        last_start = out.size();
        out.push_back({ElemKind::kRef, b_.reference(std::string(name), at)});
        have_item = true;
      } else if (c == '(') {
        if (depth + 1 > kMaxNesting) {
          return err(at, "parentheses nested deeper than " + std::to_string(kMaxNesting));
        }
        ++pos_;
        const uint32_t sub = b_.generate(rule, at);
        skip_space(true);
        std::vector<Elem> body;
        MINFER_TRY_STATUS(parse_alternates(sub, true, depth + 1, body));
        skip_space(true);
        if (peek() != ')') {
          return err(at, eof()
                             ? std::string("unbalanced '(': missing ')'")
                             : std::string("unbalanced '(': expected ')', found '") + peek() + "'");
        }
        ++pos_;
        b_.set_body(sub, std::move(body));
        last_start = out.size();
        out.push_back({ElemKind::kRef, sub});
        have_item = true;
      } else if (c == '<') {
        return err(at, "token references (<[id]>, <name>) are not supported");
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) return err(at, std::string("'") + c + "' has nothing to repeat");
        uint32_t min = 0;
        int64_t max = -1;
        ++pos_;
        if (c == '+') {
          min = 1;
        } else if (c == '?') {
          max = 1;
        } else if (c == '{') {
          MINFER_TRY_STATUS(parse_braces(at, min, max));
        }
        MINFER_TRY_STATUS(b_.repeat(rule, at, out, last_start, min, max));
        // The repetition is the item now: `x{2}{3}` repeats `x{2}`.
      } else if (c == ')' || c == '|' || c == '\n') {
        return Ok{};
      } else if (c == ']') {
        return err(at, "unbalanced ']'");
      } else {
        return err(at, std::string("unexpected character '") + c + "'");
      }
    }
  }

  Result<uint32_t> parse_int(size_t open) {
    skip_space(true);
    const size_t start = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kMaxRepetition) {
        return err(start, "repetition count larger than " + std::to_string(kMaxRepetition));
      }
      ++pos_;
    }
    if (pos_ == start) return err(open, "expected a number in '{...}'");
    skip_space(true);
    return static_cast<uint32_t>(v);
  }

  Status parse_braces(size_t open, uint32_t& min, int64_t& max) {
    MINFER_TRY(min, parse_int(open));
    if (peek() == '}') {
      ++pos_;
      max = min;
      return Ok{};
    }
    if (peek() != ',') return err(open, "expected ',' or '}' in '{...}'");
    ++pos_;
    skip_space(true);
    if (peek() == '}') {
      ++pos_;
      max = -1;
      return Ok{};
    }
    MINFER_TRY(const uint32_t n, parse_int(open));
    if (peek() != '}') return err(open, "unbalanced '{': missing '}'");
    ++pos_;
    if (n < min) return err(open, "repetition {m,n} with n < m");
    max = n;
    return Ok{};
  }

  std::string_view src_;
  Grammar::Builder& b_;
  size_t pos_ = 0;
};

}  // namespace

CharClass make_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  CharClass out;
  for (const auto& r : ranges) {
    if (!out.ranges.empty() && r.first <= out.ranges.back().second + 1) {
      out.ranges.back().second = std::max(out.ranges.back().second, r.second);
    } else {
      out.ranges.push_back(r);
    }
  }
  if (!negated) return out;
  CharClass neg;
  uint32_t next = 0;
  for (const auto& r : out.ranges) {
    if (r.first > next) neg.ranges.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) neg.ranges.emplace_back(next, kMaxCodePoint);
  return neg;
}

std::string Grammar::Builder::where(size_t offset) const {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < src.size(); ++i) {
    if (src[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

Result<uint32_t> Grammar::Builder::define(const std::string& name, size_t at) {
  const uint32_t id = reference(name, at);
  Rule& r = rules[id];
  if (r.defined) {
    return make_error(where(at) + ": rule '" + name + "' defined twice (first at " +
                      where(r.def_at) + ")");
  }
  r.defined = true;
  r.def_at = at;
  return id;
}

uint32_t Grammar::Builder::reference(const std::string& name, size_t at) {
  auto it = ids.find(name);
  if (it != ids.end()) return it->second;
  const auto id = static_cast<uint32_t>(rules.size());
  rules.push_back(Rule{.name = name, .ref_at = at});
  ids.emplace(name, id);
  return id;
}

uint32_t Grammar::Builder::generate(uint32_t owner, size_t at) {
  const auto id = static_cast<uint32_t>(rules.size());
  const Rule& o = rules[owner];
  const uint32_t base = o.generated ? o.owner : owner;
  rules.push_back(Rule{.name = rules[base].name + "-" + std::to_string(id),
                       .defined = true,
                       .generated = true,
                       .owner = base,
                       .def_at = at});
  return id;
}

void Grammar::Builder::set_body(uint32_t rule, std::vector<Elem> body) {
  n_elems += body.size();
  rules[rule].body = std::move(body);
}

uint32_t Grammar::Builder::add_class(CharClass c) {
  auto it = class_ids.find(c.ranges);
  if (it != class_ids.end()) return it->second;
  const auto id = static_cast<uint32_t>(classes.size());
  class_ids.emplace(c.ranges, id);
  classes.push_back(std::move(c));
  return id;
}

Status Grammar::Builder::repeat(uint32_t rule, size_t at, std::vector<Elem>& out, size_t last_start,
                                uint32_t min, int64_t max) {
  std::vector<Elem> item(out.begin() + static_cast<std::ptrdiff_t>(last_start), out.end());
  out.resize(last_start);
  if (item.empty() || max == 0) return Ok{};
  if (item.size() > 1) {
    const uint32_t wrap = generate(rule, at);
    std::vector<Elem> body = item;
    body.push_back({ElemKind::kEnd, 0});
    set_body(wrap, std::move(body));
    item = {{ElemKind::kRef, wrap}};
  }
  const size_t added = static_cast<size_t>(min) + (max < 0 ? 4 : static_cast<size_t>(max) * 4);
  if (n_elems + out.size() + added > kMaxGrammarElems) {
    return make_error(where(at) + ": grammar larger than " + std::to_string(kMaxGrammarElems) +
                      " elements after expanding repetitions");
  }
  for (uint32_t i = 0; i < min; ++i) out.push_back(item[0]);
  if (max < 0) {
    // x* ::= x x* | (empty)
    const uint32_t star = generate(rule, at);
    set_body(star, {item[0], {ElemKind::kRef, star}, {ElemKind::kAlt, 0}, {ElemKind::kEnd, 0}});
    out.push_back({ElemKind::kRef, star});
  } else if (static_cast<uint32_t>(max) > min) {
    // x{0,k} ::= x x{0,k-1} | (empty), innermost first.
    uint32_t prev = 0;
    bool have_prev = false;
    for (uint32_t i = min; i < static_cast<uint32_t>(max); ++i) {
      const uint32_t opt = generate(rule, at);
      std::vector<Elem> body = {item[0]};
      if (have_prev) body.push_back({ElemKind::kRef, prev});
      body.push_back({ElemKind::kAlt, 0});
      body.push_back({ElemKind::kEnd, 0});
      set_body(opt, std::move(body));
      prev = opt;
      have_prev = true;
    }
    out.push_back({ElemKind::kRef, prev});
  }
  return Ok{};
}

Status parse_gbnf_rules(Grammar::Builder& b) {
  Parser p(b.src, b);
  return p.parse();
}

}  // namespace minfer::grammar
