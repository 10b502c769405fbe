// Stage 5 (messages → text): Value printing, comparison and the JSON bridge.
// Invariant: every text produced here is byte-equal to what CPython prints for the
// same object (str(), repr(), json.dumps(ensure_ascii=False)), since that is the oracle.
#include "chat/template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/json_escape.h"

namespace minfer::chat_template {

void fail(const std::string& message) {
  throw TemplateError(message);
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), f_(f) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}
Value::Value(List l, bool tuple)
    : kind_(Kind::kList), tuple_(tuple), list_(std::make_shared<List>(std::move(l))) {}
Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::move(d);
  return v;
}
Value Value::callable(Function f, std::string name) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Function>(std::move(f));
  v.s_ = std::move(name);
  return v;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->is_namespace || dict_->is_loop || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : dict_->is_loop ? "LoopContext" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]d[.ddd]e[+-]XX: split into sign, digits and decimal exponent.
  bool neg = sci[0] == '-';
  size_t epos = sci.find('e');
  std::string mant = sci.substr(neg ? 1 : 0, epos - (neg ? 1 : 0));
  int exp10 = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  // CPython repr switches to exponent form outside 1e-4 <= |f| < 1e16.
  if (exp10 < -4 || exp10 >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + eb;
  }
  if (exp10 < 0) return out + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  size_t int_len = static_cast<size_t>(exp10) + 1;
  if (digits.size() <= int_len)
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::string py_repr_string(std::string_view s) {
  char q = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"'
                                                                                             : '\'';
  std::string out(1, q);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out + q;
}

namespace {
std::string join_repr(const List& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i].repr();
  }
  return out;
}
std::string dict_repr(const Dict& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    out += py_repr_string(d.items[i].first) + ": " + d.items[i].second.repr();
  }
  return out + "}";
}
}  // namespace

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return format_float(f_);
    case Kind::kString:
      return py_repr_string(s_);
    case Kind::kList: {
      std::string out(1, tuple_ ? '(' : '[');
      out += join_repr(*list_);
      out += !tuple_ ? "]" : list_->size() == 1 ? ",)" : ")";
      return out;
    }
    case Kind::kDict:
      if (dict_->is_namespace) return "<Namespace " + dict_repr(*dict_) + ">";
      if (dict_->is_loop) fail("printing the loop object is not supported");
      return dict_repr(*dict_);
    case Kind::kCallable:
      fail("printing a callable ('" + s_ + "') is not supported");
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric(a) && numeric(b)) {
    auto as_num = [](const Value& v) {
      return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_float();
    };
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
      auto as_i = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
      return as_i(a) == as_i(b);
    }
    return as_num(a) == as_num(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!equals(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case K::kDict: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      if (a.dict().is_namespace || b.dict().is_namespace) return false;
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* o = b.dict().find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case K::kCallable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric(a) && numeric(b)) {
    auto as_num = [](const Value& v) {
      return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_float();
    };
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    double x = as_num(a), y = as_num(b);
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() > b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
       "'");
}

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value(j.get<bool>());
    case T::number_integer:
      return Value(j.get<int64_t>());
    case T::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case T::number_float:
      return Value(j.get<double>());
    case T::string:
      return Value(j.get<std::string>());
    case T::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case T::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, v] : j.items()) d->items.emplace_back(k, from_json(v));
      return Value::dict(std::move(d));
    }
    default:
      fail("unsupported JSON value type in template context");
  }
}

namespace {
void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (json_must_escape(c)) {
      append_json_escape(out, c);
    } else {
      out += ch;
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, const JsonDumpOptions& opt, int depth) {
  const bool pretty = opt.indent >= 0;
  const std::string& item_sep =
      opt.item_sep.empty() ? (pretty ? std::string(",") : std::string(", ")) : opt.item_sep;
  const std::string& key_sep = opt.key_sep.empty() ? std::string(": ") : opt.key_sep;
  auto newline = [&](int d) {
    if (!pretty) return;
    out += '\n';
    out.append(static_cast<size_t>(opt.indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      double f = v.as_float();
      out += std::isnan(f)   ? "NaN"
             : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                             : format_float(f);
      return;
    }
    case Value::Kind::kString:
      json_string(out, v.str());
      return;
    case Value::Kind::kList: {
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_dump(out, v.list()[i], opt, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().is_namespace || v.dict().is_loop)
        fail("Object of type " + v.type_name() + " is not JSON serializable");
      if (v.dict().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first);
        out += key_sep;
        json_dump(out, items[i]->second, opt, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      fail("Object of type " + v.type_name() + " is not JSON serializable");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  json_dump(out, v, opt, 0);
  return out;
}

}  // namespace minfer::chat_template
