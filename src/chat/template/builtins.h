// Stage 5 (messages → text): the operations shared by the evaluator, the filters, the
// tests and the Python methods. Invariant: each behaves as jinja2's sandboxed
// environment does on the same Python objects, or fails with TemplateError naming the
// unsupported filter / test / method — never a silently different result.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/template/value.h"

namespace minfer::chat_template {

// jinja2 Environment.getattr / getitem: `a.b` prefers Python attributes (methods) and
// falls back to items; `a['b']` prefers items and falls back to attributes.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// Items of a `for` loop / list(): list items, dict keys, string characters; undefined
// iterates as empty; anything else fails as Python's iter() does.
List iterate(const Value& v);
bool contains(const Value& container, const Value& item);  // Python `in`

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
// Bound Python methods of str / dict / list; null Value kind (undefined) if none.
bool has_method(const Value& obj, const std::string& name);
Value call_method(const Value& obj, const std::string& name, CallArgs& args);

// Python string helpers (code-point aware where Python is).
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count);
List py_split(std::string_view s, const Value& sep, int64_t maxsplit);

// Argument binding for builtins: positional first, then keywords by name.
struct ArgSpec {
  const char* name;
  Value default_value;
};
std::vector<Value> bind_args(const std::string& fn, CallArgs& args,
                             const std::vector<ArgSpec>& spec);

}  // namespace minfer::chat_template
