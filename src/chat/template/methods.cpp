// Stage 5 (messages → text): attribute/item access and the Python str / dict / list
// methods chat templates call (`content.split('</think>')`, `message.get('x')`).
// Invariant: results equal CPython's; mutating methods fail, as the sandbox refuses them.
#include <algorithm>
#include <cstdio>

#include "chat/template/builtins.h"
#include "core/utf8.h"

namespace minfer::chat_template {
namespace {

bool is_space_cp(std::string_view c) {
  if (c.size() == 1) {
    char ch = c[0];
    return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= '\x1c' && ch <= '\x1f');
  }
  // A few Unicode spaces Python's str.strip() also removes.
  return c == "\xc2\x85" || c == "\xc2\xa0" || c == "\xe3\x80\x80" || c == "\xe2\x80\xa8" ||
         c == "\xe2\x80\xa9" ||
         (c.size() == 3 && c[0] == '\xe2' && c[1] == '\x80' &&
          static_cast<unsigned char>(c[2]) >= 0x80 && static_cast<unsigned char>(c[2]) <= 0x8a);
}

const char* const kStrMethods[] = {
    "strip", "lstrip", "rstrip",     "split",   "rsplit",     "startswith", "endswith",
    "upper", "lower",  "replace",    "title",   "capitalize", "find",       "rfind",
    "count", "join",   "splitlines", "isdigit", "isalpha",    "isspace",    "index"};
const char* const kDictMethods[] = {"items", "keys", "values", "get"};
const char* const kListMethods[] = {"index", "count"};

template <size_t N>
bool in_table(const char* const (&table)[N], const std::string& name) {
  return std::find_if(std::begin(table), std::end(table),
                      [&](const char* m) { return name == m; }) != std::end(table);
}

}  // namespace

std::vector<Value> bind_args(const std::string& fn, CallArgs& args,
                             const std::vector<ArgSpec>& spec) {
  if (args.pos.size() > spec.size())
    fail(fn + "() takes at most " + std::to_string(spec.size()) + " arguments (" +
         std::to_string(args.pos.size()) + " given)");
  std::vector<Value> out;
  for (size_t i = 0; i < spec.size(); ++i)
    out.push_back(i < args.pos.size() ? args.pos[i] : spec[i].default_value);
  for (const auto& kv : args.kw) {
    // Not a structured binding: clang before 16 cannot capture one in a lambda.
    const std::string& k = kv.first;
    auto it = std::find_if(spec.begin(), spec.end(), [&](const ArgSpec& s) { return k == s.name; });
    if (it == spec.end()) fail(fn + "() got an unexpected keyword argument '" + k + "'");
    out[static_cast<size_t>(it - spec.begin())] = kv.second;
  }
  return out;
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  auto cs = utf8_chars(s);
  std::vector<std::string_view> set;
  bool custom = chars.is_string();
  if (custom)
    set = utf8_chars(chars.str());
  else if (!chars.is_none() && !chars.is_undefined())
    fail("strip arg must be None or str");
  auto strip_it = [&](std::string_view c) {
    return custom ? std::find(set.begin(), set.end(), c) != set.end() : is_space_cp(c);
  };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_it(cs[b])) ++b;
  if (right)
    while (e > b && strip_it(cs[e - 1])) --e;
  if (b == e) return "";
  return std::string(cs[b].data(),
                     static_cast<size_t>(cs[e - 1].data() + cs[e - 1].size() - cs[b].data()));
}

// Case mapping by code point for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic,
// the scripts chat content and tool schemas meet in practice; other code points pass
// through unchanged (true for Python too for every uncased script: CJK, emoji, ...).
namespace {
uint32_t decode_cp(std::string_view c) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(c[i])); };
  if (c.size() == 1) return b(0);
  if (c.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (c.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}
// Latin Extended-A pairs upper/lower as even/odd, except two runs that pair odd/even.
bool odd_is_upper(uint32_t c) {
  return (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
}
bool is_lower_cp(uint32_t c) {
  return (c >= 'a' && c <= 'z') || c == 0xB5 || (c >= 0xDF && c <= 0xFF && c != 0xF7) ||
         (c >= 0x100 && c <= 0x17F && (c & 1) == (odd_is_upper(c) ? 0u : 1u) && c != 0x131 &&
          c != 0x138 && c != 0x149 && c != 0x17F) ||
         (c >= 0x3B1 && c <= 0x3C9) || (c >= 0x430 && c <= 0x45F);
}
bool is_upper_cp(uint32_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
         (c >= 0x100 && c <= 0x17F && (c & 1) == (odd_is_upper(c) ? 1u : 0u) && c != 0x130 &&
          c != 0x138 && c != 0x149 && c != 0x178 && c != 0x17F) ||
         c == 0x178 || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x400 && c <= 0x42F);
}
// Code points no Unicode case mapping touches (CJK, kana, hangul, Arabic, Hebrew,
// Indic, Thai, punctuation, emoji, ...), so passing them through is what Python does.
bool is_uncased_block(uint32_t c) {
  return (c >= 0x590 && c <= 0x10FF) || (c >= 0x2000 && c <= 0x206F) ||
         (c >= 0x2190 && c <= 0x23FF) || (c >= 0x2500 && c <= 0x2BFF) ||
         (c >= 0x2E80 && c <= 0xA63F) || (c >= 0xAC00 && c <= 0xD7FF) ||
         (c >= 0xE000 && c <= 0xFAFF) || (c >= 0xFE00 && c <= 0xFE4F) || c >= 0x1F000;
}
// Appends the mapped text of one code point (ß upper-cases to "SS", as in Python).
// A code point outside the tables above fails loudly instead of printing a guess.
void map_case(std::string& out, std::string_view ch, bool to_upper) {
  uint32_t c = decode_cp(ch);
  if (c < 0x80) {
    char a = ch[0];
    if (to_upper && a >= 'a' && a <= 'z') a = static_cast<char>(a - 32);
    if (!to_upper && a >= 'A' && a <= 'Z') a = static_cast<char>(a + 32);
    out += a;
    return;
  }
  bool covered = c <= 0x17F || (c >= 0x391 && c <= 0x3A9) || (c >= 0x3B1 && c <= 0x3C9) ||
                 (c >= 0x400 && c <= 0x45F) || is_uncased_block(c);
  if (!covered) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "U+%04X", c);
    fail(std::string("unsupported template feature: upper/lower case mapping of ") + buf);
  }
  if (to_upper) {
    if (c == 0xDF) return void(out += "SS");
    if (c == 0x149) return void(out += "\xca\xbcN");  // ŉ → ʼN
    if (c == 0x131) return void(out += "I");
    if (c == 0x17F) return void(out += "S");
  } else if (c == 0x130) {
    return void(out += "i\xcc\x87");  // İ → i + combining dot above
  }
  uint32_t m = c;
  if (to_upper && is_lower_cp(c)) {
    m = c == 0xB5    ? 0x39C
        : c == 0xFF  ? 0x178
        : c <= 0xFE  ? c - 32
        : c <= 0x17F ? c - 1
        : c == 0x3C2 ? 0x3A3
        : c <= 0x3C9 ? c - 32
        : c <= 0x44F ? c - 32
                     : c - 80;
  } else if (!to_upper && is_upper_cp(c)) {
    m = c == 0x178   ? 0xFF
        : c <= 0xDE  ? c + 32
        : c <= 0x17F ? c + 1
        : c <= 0x3A9 ? c + 32
        : c <= 0x40F ? c + 80
                     : c + 32;
  }
  if (m == c)
    out += ch;  // unchanged: keep the original bytes
  else
    utf8::append(out, m);
}
bool is_cased(std::string_view ch) {
  uint32_t c = decode_cp(ch);
  return is_lower_cp(c) || is_upper_cp(c) || c == 0xAA || c == 0xBA || c == 0x130 || c == 0x131 ||
         c == 0x138 || c == 0x149 || c == 0x17F;
}
}  // namespace

std::string py_upper(std::string_view s) {
  std::string o;
  for (auto ch : utf8_chars(s)) map_case(o, ch, true);
  return o;
}
std::string py_lower(std::string_view s) {
  std::string o;
  for (auto ch : utf8_chars(s)) map_case(o, ch, false);
  return o;
}
std::string py_capitalize(std::string_view s) {
  auto cs = utf8_chars(s);
  std::string o;
  for (size_t i = 0; i < cs.size(); ++i) map_case(o, cs[i], i == 0);
  return o;
}
// str.title(): a cased letter after an uncased character starts a word.
std::string py_title(std::string_view s) {
  std::string o;
  bool prev_cased = false;
  for (auto ch : utf8_chars(s)) {
    map_case(o, ch, !prev_cased);
    prev_cased = is_cased(ch);
  }
  return o;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    auto cs = utf8_chars(s);
    int64_t n = 0;
    for (auto c : cs) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out += to;
    pos = f + from.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

List py_split(std::string_view s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    auto cs = utf8_chars(s);
    size_t i = 0;
    while (i < cs.size()) {
      while (i < cs.size() && is_space_cp(cs[i])) ++i;
      if (i == cs.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        // CPython keeps the remainder as is, trailing whitespace included.
        out.push_back(Value(
            std::string(cs[i].data(), static_cast<size_t>(s.data() + s.size() - cs[i].data()))));
        return out;
      }
      size_t b = i;
      while (i < cs.size() && !is_space_cp(cs[i])) ++i;
      out.push_back(Value(std::string(
          cs[b].data(), static_cast<size_t>(cs[i - 1].data() + cs[i - 1].size() - cs[b].data()))));
    }
    return out;
  }
  if (!sep.is_string()) fail("must be str or None, not " + sep.type_name());
  if (sep.str().empty()) fail("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = s.find(sep.str(), pos);
    if (f == std::string_view::npos) break;
    out.push_back(Value(std::string(s.substr(pos, f - pos))));
    pos = f + sep.str().size();
  }
  out.push_back(Value(std::string(s.substr(pos))));
  return out;
}

bool has_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return in_table(kStrMethods, name);
  if (obj.is_dict())
    return !obj.dict().is_namespace && !obj.dict().is_loop && in_table(kDictMethods, name);
  if (obj.is_list()) return in_table(kListMethods, name);
  return false;
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined())
    fail(obj.str().empty() ? "'" + name + "' of an undefined value" : obj.str());
  if (has_method(obj, name)) {
    Value self = obj;
    return Value::callable([self, name](CallArgs& a) { return call_method(self, name, a); }, name);
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail(obj.str().empty() ? "subscript of an undefined value" : obj.str());
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str())) return *v;
    if (has_method(obj, key.str())) return get_attr(obj, key.str());
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + key.str() +
                            "'");
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.is_bool() ? key.as_bool() : key.as_int();
    if (obj.is_list()) {
      auto n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list index out of range");
      return obj.list()[static_cast<size_t>(i)];
    }
    auto cs = utf8_chars(obj.str());
    auto n = static_cast<int64_t>(cs.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value(std::string(cs[static_cast<size_t>(i)]));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("'" + obj.type_name() + " object' has no item " + key.repr());
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kString: {
      List out;
      for (auto c : utf8_chars(v.str())) out.push_back(Value(std::string(c)));
      return out;
    }
    case Value::Kind::kDict: {
      if (v.dict().is_namespace || v.dict().is_loop)
        fail("'" + v.type_name() + "' object is not iterable");
      List out;
      for (const auto& kv : v.dict().items) out.push_back(Value(kv.first));
      return out;
    }
    default:
      fail("'" + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      fail("'in <string>' requires string as left operand, not " + item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict() && !container.dict().is_namespace && !container.dict().is_loop)
    return item.is_string() && container.dict().find(item.str()) != nullptr;
  for (const Value& v : iterate(container))
    if (equals(v, item)) return true;
  return false;
}

Value call_method(const Value& obj, const std::string& name, CallArgs& a) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      auto v = bind_args(name, a, {{"chars", Value::none()}});
      return Value(py_strip(s, v[0], name != "rstrip", name != "lstrip"));
    }
    if (name == "split") {
      auto v = bind_args(name, a, {{"sep", Value::none()}, {"maxsplit", Value(-1)}});
      return Value(py_split(s, v[0], v[1].as_int()));
    }
    if (name == "rsplit") {
      auto v = bind_args(name, a, {{"sep", Value::none()}, {"maxsplit", Value(-1)}});
      if (v[1].as_int() >= 0) fail("unsupported template feature: str.rsplit with maxsplit");
      return Value(py_split(s, v[0], -1));
    }
    if (name == "startswith" || name == "endswith") {
      auto v = bind_args(name, a, {{"prefix", Value()}});
      List options = v[0].is_tuple() ? v[0].list() : List{v[0]};
      for (const Value& o : options) {
        if (!o.is_string())
          fail(name + " first arg must be str or a tuple of str, not " + o.type_name());
        const std::string& p = o.str();
        bool hit = name == "startswith"
                       ? s.compare(0, p.size(), p) == 0
                       : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
        if (hit) return Value(true);
      }
      return Value(false);
    }
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower") return Value(py_lower(s));
    if (name == "title") return Value(py_title(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    if (name == "replace") {
      auto v = bind_args(name, a, {{"old", Value()}, {"new", Value()}, {"count", Value(-1)}});
      if (!v[0].is_string() || !v[1].is_string()) fail("replace() arguments must be str");
      return Value(py_replace(s, v[0].str(), v[1].str(), v[2].as_int()));
    }
    if (name == "find" || name == "rfind" || name == "index") {
      auto v = bind_args(name, a, {{"sub", Value()}});
      if (!v[0].is_string()) fail(name + "() argument must be str");
      size_t p = name == "rfind" ? s.rfind(v[0].str()) : s.find(v[0].str());
      if (p == std::string::npos) {
        if (name == "index") fail("substring not found");
        return Value(-1);
      }
      return Value(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
    }
    if (name == "count") {
      auto v = bind_args(name, a, {{"sub", Value()}});
      if (!v[0].is_string() || v[0].str().empty())
        fail("unsupported template feature: str.count of an empty or non-str value");
      int64_t n = 0;
      for (size_t p = s.find(v[0].str()); p != std::string::npos;
           p = s.find(v[0].str(), p + v[0].str().size()))
        ++n;
      return Value(n);
    }
    if (name == "join") {
      auto v = bind_args(name, a, {{"iterable", Value()}});
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v[0])) {
        if (!x.is_string())
          fail("sequence item: expected str instance, " + x.type_name() + " found");
        if (!first) out += s;
        out += x.str();
        first = false;
      }
      return Value(out);
    }
    if (name == "splitlines") {
      bind_args(name, a, {});
      List out;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t e = s.find('\n', pos);
        if (e == std::string::npos) e = s.size();
        std::string line = s.substr(pos, e - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        out.push_back(Value(line));
        pos = e + 1;
      }
      return Value(out);
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace") {
      bind_args(name, a, {});
      if (s.empty()) return Value(false);
      for (char c : s) {
        auto u = static_cast<unsigned char>(c);
        bool ok = name == "isdigit"   ? std::isdigit(u) != 0
                  : name == "isalpha" ? std::isalpha(u) != 0
                                      : std::isspace(u) != 0;
        if (!ok) return Value(false);
      }
      return Value(true);
    }
  } else if (obj.is_dict()) {
    const Dict& d = obj.dict();
    if (name == "get") {
      auto v = bind_args(name, a, {{"key", Value()}, {"default", Value::none()}});
      if (v[0].is_string())
        if (const Value* x = d.find(v[0].str())) return *x;
      return v[1];
    }
    bind_args(name, a, {});
    List out;
    for (const auto& [k, v] : d.items) {
      if (name == "items")
        out.push_back(Value(List{Value(k), v}, true));
      else if (name == "keys")
        out.push_back(Value(k));
      else
        out.push_back(v);
    }
    return Value(std::move(out));
  } else if (obj.is_list()) {
    auto v = bind_args(name, a, {{"value", Value()}});
    int64_t n = 0, i = 0;
    for (const Value& x : obj.list()) {
      if (equals(x, v[0])) {
        if (name == "index") return Value(i);
        ++n;
      }
      ++i;
    }
    if (name == "index") fail(v[0].repr() + " is not in list");
    return Value(n);
  }
  fail("unsupported template feature: method '" + name + "' of " + obj.type_name());
}

}  // namespace minfer::chat_template
