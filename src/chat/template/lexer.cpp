// Stage 5 (messages → text): the lexer, a hand transcription of jinja2/lexer.py's
// rules (root / comment / block / variable / raw states). Invariant: the kept text and
// the token sequence equal jinja2's for trim_blocks=lstrip_blocks=True.
#include "chat/template/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/utf8.h"

namespace minfer::chat_template {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// jinja2 joins source.splitlines() with "\n": every Python line boundary becomes "\n"
// and a single trailing newline disappears (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out += '\n';
    } else if (c == '\v' || c == '\f' || c == '\x1c' || c == '\x1d' || c == '\x1e') {
      out += '\n';
    } else if (c == '\xc2' && i + 1 < s.size() && s[i + 1] == '\x85') {
      out += '\n';
      ++i;
    } else if (c == '\xe2' && i + 2 < s.size() && s[i + 1] == '\x80' &&
               (s[i + 2] == '\xa8' || s[i + 2] == '\xa9')) {
      out += '\n';
      i += 2;
    } else {
      out += c;
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python "unicode-escape" decoding of a string literal body; unknown escapes keep
// their backslash, as Python does.
std::string unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](size_t n) -> bool {
      uint32_t cp = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k])))
          return false;
        char h = static_cast<char>(std::tolower(static_cast<unsigned char>(body[i + k])));
        cp = cp * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
      }
      utf8::append(out, cp);
      i += n;
      return true;
    };
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        if (!hex(2)) out += "\\x";
        break;
      case 'u':
        if (!hex(4)) out += "\\u";
        break;
      case 'U':
        if (!hex(8)) out += "\\U";
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          utf8::append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opt) : src_(std::move(src)), opt_(opt) {}

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;  // did the previous match end with "\n"? (jinja2's flag)
    while (pos < src_.size()) {
      size_t open = find_open(pos);
      std::string text =
          src_.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
      if (open == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      char type = src_[open + 1];  // '{', '%', '#'
      char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        size_t end = text.find_last_not_of(" \t\n\r\v\f");
        text.resize(end == std::string::npos ? 0 : end + 1);
      } else if (sign != '+' && opt_.lstrip_blocks && type != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && is_ws(text[k]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(std::move(text), pos);
      pos = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      line_ = line_at(open);
      if (type == '#') {
        auto r = comment(pos);
        if (!r.ok()) return r.error();
        line_starting = r.value().second;
        pos = r.value().first;
      } else if (type == '%' && is_raw(pos)) {
        auto r = raw(pos, line_starting);
        if (!r.ok()) return r.error();
        line_starting = r.value().second;
        pos = r.value().first;
      } else {
        push(type == '{' ? TokKind::kVarBegin : TokKind::kBlockBegin, type == '{' ? "{{" : "{%");
        auto r = tag(pos, type == '%');
        if (!r.ok()) return r.error();
        line_starting = r.value().second;
        pos = r.value().first;
      }
    }
    push(TokKind::kEof, "");
    return std::move(toks_);
  }

 private:
  size_t find_open(size_t pos) const {
    for (size_t p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1))
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
        return p;
    return std::string::npos;
  }
  int line_at(size_t pos) {
    while (counted_ < pos) line_count_ += src_[counted_++] == '\n';
    return line_count_;
  }
  void emit_text(std::string text, size_t pos) {
    if (text.empty()) return;
    line_ = line_at(pos);
    push(TokKind::kText, std::move(text));
  }
  void push(TokKind k, std::string text) {
    toks_.push_back(Token{.kind = k, .text = std::move(text), .line = line_});
  }

  // End-of-tag suffixes: "-X}" eats all following whitespace, "+X}" nothing, plain "X}"
  // one newline when trim_blocks applies (block and comment tags only).
  size_t after_end(size_t end_pos, char sign, bool trims, bool* ended_nl) const {
    size_t p = end_pos;
    if (sign == '-') {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (sign != '+' && trims && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    *ended_nl = p > 0 && src_[p - 1] == '\n';
    return p;
  }

  Result<std::pair<size_t, bool>> comment(size_t pos) {
    size_t e = src_.find("#}", pos);
    if (e == std::string::npos)
      return make_error("line " + std::to_string(line_) + ": missing end of comment tag");
    char sign = e > pos ? src_[e - 1] : '\0';
    bool nl = false;
    size_t p = after_end(e + 2, sign, true, &nl);
    return std::pair{p, nl};
  }

  bool is_raw(size_t pos) const {
    size_t p = pos;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  Result<std::pair<size_t, bool>> raw(size_t pos, bool line_starting) {
    size_t p = src_.find("%}", pos);
    bool nl = false;
    p = src_[p - 1] == '-' ? after_end(p + 2, '-', true, &nl) : p + 2;
    for (size_t q = find_open(p); q != std::string::npos; q = find_open(q + 1)) {
      if (src_[q + 1] != '%') continue;
      size_t k = q + 2;
      char sign = src_[k] == '-' || src_[k] == '+' ? src_[k++] : '\0';
      while (k < src_.size() && is_ws(src_[k])) ++k;
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < src_.size() && is_ws(src_[k])) ++k;
      char esign = '\0';
      if (src_[k] == '-' || src_[k] == '+') esign = src_[k++];
      if (src_.compare(k, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, q - p);
      if (sign == '-') {
        size_t end = text.find_last_not_of(" \t\n\r\v\f");
        text.resize(end == std::string::npos ? 0 : end + 1);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        bool all_ws = l_pos < text.size() && (l_pos > 0 || (nl || line_starting));
        for (size_t m = l_pos; all_ws && m < text.size(); ++m) all_ws = is_ws(text[m]);
        if (all_ws) text.resize(l_pos);
      }
      emit_text(std::move(text), p);
      size_t end = after_end(k + 2, esign, true, &nl);
      return std::pair{end, nl};
    }
    return make_error("line " + std::to_string(line_) + ": missing end of raw directive");
  }

  Result<std::pair<size_t, bool>> tag(size_t pos, bool block) {
    std::string balance;  // expected closers, innermost last
    const char closer = block ? '%' : '}';
    size_t p = pos;
    while (true) {
      if (p >= src_.size())
        return make_error("line " + std::to_string(line_) +
                          ": unexpected end of template inside a tag");
      line_ = line_at(p);
      char c = src_[p];
      if (balance.empty()) {
        // End tag forms: "-%}" / "+%}" / "%}" (and the same with "}}").
        for (char sign : {'-', '+', '\0'}) {
          size_t q = p + (sign ? 1 : 0);
          if (sign && c != sign) continue;
          if (sign == '+' && !block) continue;
          if (q + 1 < src_.size() && src_[q] == closer && src_[q + 1] == '}') {
            push(block ? TokKind::kBlockEnd : TokKind::kVarEnd, block ? "%}" : "}}");
            bool nl = false;
            size_t end = after_end(q + 2, sign, block, &nl);
            return std::pair{end, nl};
          }
        }
      }
      if (is_ws(c)) {
        ++p;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        while (q < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
          ++q;
        bool is_float = false;
        if (q + 1 < src_.size() && src_[q] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
          is_float = true;
          ++q;
          while (q < src_.size() &&
                 (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
            ++q;
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
            is_float = true;
            q = r;
            while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) ++q;
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k)
          if (src_[k] != '_') num += src_[k];
        Token t{.kind = is_float ? TokKind::kFloat : TokKind::kInt, .text = num, .line = line_};
        // std::strtod / strtoll, not stod / stoll: an out-of-range literal is an error
        // here, not an exception out of compile() (fuzz_chat_template found one).
        errno = 0;
        char* end = nullptr;
        if (is_float)
          t.float_value = std::strtod(num.c_str(), &end);
        else
          t.int_value = std::strtoll(num.c_str(), &end, 10);
        if (errno == ERANGE || end != num.c_str() + num.size())
          return make_error("line " + std::to_string(line_) + ": number literal '" + num +
                            "' is out of range");
        toks_.push_back(std::move(t));
        p = q;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
          ++q;
        push(TokKind::kName, src_.substr(p, q - p));
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= src_.size())
          return make_error("line " + std::to_string(line_) + ": unterminated string literal");
        push(TokKind::kString, unescape(std::string_view(src_).substr(p + 1, q - p - 1)));
        p = q + 1;
        continue;
      }
      static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
      bool two = false;
      for (const char* op : kTwo)
        if (src_.compare(p, 2, op) == 0) {
          push(TokKind::kOp, op);
          p += 2;
          two = true;
          break;
        }
      if (two) continue;
      if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
        return make_error("line " + std::to_string(line_) + ": unexpected character '" +
                          std::string(1, c) + "'");
      if (c == '(' || c == '[' || c == '{') balance += c == '(' ? ')' : c == '[' ? ']' : '}';
      if (c == ')' || c == ']' || c == '}') {
        if (balance.empty() || balance.back() != c)
          return make_error("line " + std::to_string(line_) + ": unexpected '" + std::string(1, c) +
                            "'");
        balance.pop_back();
      }
      push(TokKind::kOp, std::string(1, c));
      ++p;
    }
  }

  std::string src_;
  LexOptions opt_;
  std::vector<Token> toks_;
  int line_ = 1;
  int line_count_ = 1;
  size_t counted_ = 0;
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source, const LexOptions& opt) {
  return Lexer(normalize_newlines(source), opt).run();
}

}  // namespace minfer::chat_template
