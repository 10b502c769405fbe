// Stage 5 (messages → text): jinja2's built-in filters and tests that chat templates
// use, plus transformers' tojson. Invariant: an unknown or unimplemented filter/test is
// a TemplateError naming it; everything implemented matches jinja2/filters.py & tests.py.
#include <algorithm>
#include <cmath>

#include "chat/template/builtins.h"

namespace minfer::chat_template {
namespace {

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// jinja2 do_title: split on runs of "-", whitespace and opening brackets; each piece
// gets an upper first character and a lower rest.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    bool sep = c == '-' || c == ' ' || (c >= '\t' && c <= '\r') || c == '(' || c == '{' ||
               c == '[' || c == '<';
    if (sep)
      out += c;
    else
      out += word_start ? py_upper(std::string(1, c)) : py_lower(std::string(1, c));
    word_start = sep;
  }
  return out;
}

int64_t to_int(const Value& v, const Value& dflt) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  if (v.is_float()) return static_cast<int64_t>(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value::none(), true, true);
    try {
      size_t used = 0;
      long long i = std::stoll(s, &used, 10);
      if (used == s.size()) return i;
      double f = std::stod(s, &used);
      if (used == s.size()) return static_cast<int64_t>(f);
    } catch (const std::exception&) {
    }
  }
  return dflt.is_int() ? dflt.as_int() : 0;
}

double to_float(const Value& v, const Value& dflt) {
  if (v.is_number()) return v.as_float();
  if (v.is_bool()) return v.as_bool();
  if (v.is_string()) {
    try {
      size_t used = 0;
      std::string s = py_strip(v.str(), Value::none(), true, true);
      double f = std::stod(s, &used);
      if (used == s.size()) return f;
    } catch (const std::exception&) {
    }
  }
  return dflt.as_float();
}

// Sort key of the sort/dictsort/unique filters: strings fold case unless asked not to.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

Value attr_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  Value cur = item;
  std::string path = attribute.str(), part;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))))
                 : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

CallArgs rest_args(CallArgs& a, size_t from) {
  CallArgs r;
  for (size_t i = from; i < a.pos.size(); ++i) r.pos.push_back(a.pos[i]);
  r.kw = a.kw;
  return r;
}

// select / reject / selectattr / rejectattr share one loop (jinja2 select_or_reject).
Value select_or_reject(const Value& seq, CallArgs& a, bool by_attr, bool keep_if) {
  size_t first = 0;
  Value attribute;
  if (by_attr) {
    if (a.pos.empty()) fail("selectattr/rejectattr need an attribute name");
    attribute = a.pos[0];
    first = 1;
  }
  std::string test;
  CallArgs targs;
  if (a.pos.size() > first) {
    if (!a.pos[first].is_string()) fail("test name must be a string");
    test = a.pos[first].str();
    targs = rest_args(a, first + 1);
  }
  List out;
  for (const Value& item : iterate(seq)) {
    Value v = by_attr ? attr_path(item, attribute) : item;
    CallArgs call = targs;
    bool r = test.empty() ? v.truthy() : apply_test(test, v, call);
    if (r == keep_if) out.push_back(item);
  }
  return Value(std::move(out));
}

std::string indent_text(const std::string& s_in, const Value& width, bool first, bool blank) {
  std::string ind = width.is_string()
                        ? width.str()
                        : std::string(static_cast<size_t>(to_int(width, Value(4))), ' ');
  std::string s = s_in + "\n";  // jinja2's own quirk so splitlines keeps a trailing empty line
  CallArgs no_args;
  List lines = call_method(Value(s), "splitlines", no_args).list();
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i].str();
  } else {
    rv = lines.empty() ? "" : lines[0].str();
    for (size_t i = 1; i < lines.size(); ++i)
      rv += "\n" + (lines[i].str().empty() ? "" : ind) + lines[i].str();
  }
  return first ? ind + rv : rv;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "safe") return v;
  if (name == "tojson") {
    // transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
    // sort_keys=sort_keys)
    auto p = bind_args(name, a,
                       {{"ensure_ascii", Value(false)},
                        {"indent", Value::none()},
                        {"separators", Value::none()},
                        {"sort_keys", Value(false)}});
    if (p[0].truthy()) fail("unsupported template feature: tojson(ensure_ascii=True)");
    JsonDumpOptions opt;
    if (p[1].is_int())
      opt.indent = static_cast<int>(p[1].as_int());
    else if (!p[1].is_none())
      fail("unsupported template feature: tojson indent of type " + p[1].type_name());
    if (p[2].is_list() && p[2].list().size() == 2) {
      opt.item_sep = p[2].list()[0].str();
      opt.key_sep = p[2].list()[1].str();
      if (opt.item_sep.empty())
        fail("unsupported template feature: tojson with an empty item separator");
    }
    opt.sort_keys = p[3].truthy();
    return Value(to_json(v, opt));
  }
  if (name == "trim") {
    auto p = bind_args(name, a, {{"chars", Value::none()}});
    return Value(py_strip(v.to_str(), p[0], true, true));
  }
  if (name == "length" || name == "count") {
    if (v.is_undefined()) return Value(0);
    if (v.is_string()) return Value(static_cast<int64_t>(utf8_length(v.str())));
    if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
    if (v.is_dict() && !v.dict().is_namespace && !v.dict().is_loop)
      return Value(static_cast<int64_t>(v.dict().items.size()));
    fail("object of type '" + v.type_name() + "' has no len()");
  }
  if (name == "default" || name == "d") {
    auto p = bind_args(name, a, {{"default_value", Value("")}, {"boolean", Value(false)}});
    if (v.is_undefined() || (p[1].truthy() && !v.truthy())) return p[0];
    return v;
  }
  if (name == "join") {
    auto p = bind_args(name, a, {{"d", Value("")}, {"attribute", Value::none()}});
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v)) {
      if (!first) out += p[0].to_str();
      out += (p[1].is_none() ? x : attr_path(x, p[1])).to_str();
      first = false;
    }
    return Value(out);
  }
  if (name == "upper") return Value(py_upper(v.to_str()));
  if (name == "lower") return Value(py_lower(v.to_str()));
  if (name == "capitalize") return Value(py_capitalize(v.to_str()));
  if (name == "title") return Value(jinja_title(v.to_str()));
  if (name == "string") return Value(v.to_str());
  if (name == "e" || name == "escape" || name == "forceescape")
    return Value(html_escape(v.to_str()));
  if (name == "replace") {
    auto p = bind_args(name, a, {{"old", Value()}, {"new", Value()}, {"count", Value::none()}});
    return Value(
        py_replace(v.to_str(), p[0].to_str(), p[1].to_str(), p[2].is_int() ? p[2].as_int() : -1));
  }
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(iterate(v));
  if (name == "int") {
    auto p = bind_args(name, a, {{"default", Value(0)}, {"base", Value(10)}});
    if (!p[1].is_int() || p[1].as_int() != 10)
      fail("unsupported template feature: int filter with base");
    return Value(to_int(v, p[0]));
  }
  if (name == "float") {
    auto p = bind_args(name, a, {{"default", Value(0.0)}});
    return Value(to_float(v, p[0]));
  }
  if (name == "abs") {
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    fail("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") {
    auto p = bind_args(name, a, {{"precision", Value(0)}, {"method", Value("common")}});
    if (!v.is_number()) fail("round filter needs a number");
    double scale = std::pow(10.0, static_cast<double>(p[0].as_int()));
    double x = v.as_float() * scale;
    std::string m = p[1].str();
    double r = m == "common"  ? std::nearbyint(x)
               : m == "ceil"  ? std::ceil(x)
               : m == "floor" ? std::floor(x)
                              : NAN;
    if (std::isnan(r)) fail("method must be common, ceil or floor");
    if (m == "common" && v.is_int()) return v;
    return Value(r / scale);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) fail("items filter needs a mapping, got " + v.type_name());
    CallArgs none;
    return call_method(v, "items", none);
  }
  if (name == "dictsort") {
    auto p = bind_args(
        name, a,
        {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
    if (!v.is_dict()) fail("dictsort filter needs a mapping, got " + v.type_name());
    int pos = p[1].str() == "key" ? 0 : p[1].str() == "value" ? 1 : -1;
    if (pos < 0) fail("You can only sort by either \"key\" or \"value\"");
    CallArgs none;
    List items = call_method(v, "items", none).list();
    bool cs = p[0].truthy();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return compare(sort_key(x.list()[static_cast<size_t>(pos)], cs),
                     sort_key(y.list()[static_cast<size_t>(pos)], cs)) < 0;
    });
    if (p[2].truthy()) std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "select") return select_or_reject(v, a, false, true);
  if (name == "reject") return select_or_reject(v, a, false, false);
  if (name == "selectattr") return select_or_reject(v, a, true, true);
  if (name == "rejectattr") return select_or_reject(v, a, true, false);
  if (name == "map") {
    List out;
    const Value* attribute = nullptr;
    Value dflt;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute")
        attribute = &x;
      else if (k == "default")
        dflt = x;
      else
        fail("map() got an unexpected keyword argument '" + k + "'");
    }
    if (attribute) {
      for (const Value& item : iterate(v)) {
        Value r = attr_path(item, *attribute);
        out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
      }
      return Value(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_string())
      fail("map filter needs a filter name or attribute=");
    std::string f = a.pos[0].str();
    CallArgs fargs = rest_args(a, 1);
    for (const Value& item : iterate(v)) {
      CallArgs call = fargs;
      out.push_back(apply_filter(f, item, call));
    }
    return Value(std::move(out));
  }
  if (name == "unique") {
    auto p = bind_args(name, a, {{"case_sensitive", Value(false)}, {"attribute", Value::none()}});
    List out, seen;
    for (const Value& item : iterate(v)) {
      Value key = sort_key(p[1].is_none() ? item : attr_path(item, p[1]), p[0].truthy());
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cs = utf8_chars(v.str());
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return Value(out);
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "sort") {
    auto p = bind_args(name, a,
                       {{"reverse", Value(false)},
                        {"case_sensitive", Value(false)},
                        {"attribute", Value::none()}});
    List items = iterate(v);
    bool cs = p[1].truthy();
    auto key = [&](const Value& x) {
      return sort_key(p[2].is_none() ? x : attr_path(x, p[2]), cs);
    };
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& x, const Value& y) { return compare(key(x), key(y)) < 0; });
    if (p[0].truthy()) std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "indent") {
    auto p =
        bind_args(name, a, {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
    return Value(indent_text(v.to_str(), p[0], p[1].truthy(), p[2].truthy()));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char c : v.to_str()) {
      bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
               (static_cast<unsigned char>(c) & 0x80);
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "sum") {
    auto p = bind_args(name, a, {{"attribute", Value::none()}, {"start", Value(0)}});
    Value acc = p[1];
    for (const Value& x : iterate(v)) {
      Value y = p[0].is_none() ? x : attr_path(x, p[0]);
      if (!acc.is_number() || !y.is_number()) fail("sum filter supports numbers only");
      acc = acc.is_int() && y.is_int() ? Value(acc.as_int() + y.as_int())
                                       : Value(acc.as_float() + y.as_float());
    }
    return acc;
  }
  fail("unsupported template feature: filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  auto arg = [&]() -> const Value& {
    if (a.pos.size() != 1 || !a.kw.empty()) fail("test '" + name + "' takes one argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dict().is_namespace && !v.dict().is_loop;
  if (name == "iterable")
    return v.is_undefined() || v.is_string() || v.is_list() ||
           (v.is_dict() && !v.dict().is_namespace && !v.dict().is_loop);
  if (name == "sequence")
    return v.is_undefined() || v.is_string() || v.is_list() ||
           (v.is_dict() && !v.dict().is_namespace && !v.dict().is_loop);
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "equalto" || name == "eq" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg()) < 0;
  if (name == "le" || name == "<=") return compare(v, arg()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg()) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg()) >= 0;
  if (name == "in") return contains(arg(), v);
  if (name == "sameas") {
    const Value& o = arg();
    if (v.is_none() || o.is_none() || v.is_bool() || o.is_bool())
      return v.kind() == o.kind() && equals(v, o);
    if (v.is_dict() && o.is_dict()) return v.dict_ptr() == o.dict_ptr();
    fail("unsupported template feature: 'sameas' test on " + v.type_name());
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int()) fail("test '" + name + "' needs an integer");
    if (name == "divisibleby") {
      const Value& n = arg();
      if (!n.is_int() || n.as_int() == 0) fail("divisibleby needs a non-zero integer");
      return v.as_int() % n.as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) fail("test '" + name + "' needs a string");
    std::string s = v.str();
    bool has_cased = std::any_of(
        s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return has_cased && (name == "lower" ? py_lower(s) == s : py_upper(s) == s);
  }
  fail("unsupported template feature: test '" + name + "'");
}

}  // namespace minfer::chat_template
