// Stage 5 (messages → text): the dynamic value of the Jinja interpreter, modelled on
// the Python objects jinja2 sees. Invariants: printing follows Python str()/repr();
// dicts keep insertion order; lists/dicts are shared (Python reference semantics) and
// only namespaces are ever mutated after construction (the sandbox is immutable).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minfer::chat_template {

// Render-time failure. The interpreter is deeply recursive, so failures unwind with
// this exception inside the library; the public API (template.h) turns it into a
// Result before it leaves the stage.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& message);

class Value;
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
using Function = std::function<Value(CallArgs&)>;

struct Dict;
using List = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);                                    // NOLINT(google-explicit-constructor)
  Value(int64_t i);                                 // NOLINT(google-explicit-constructor)
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double f);                                  // NOLINT(google-explicit-constructor)
  Value(std::string s);                             // NOLINT(google-explicit-constructor)
  Value(const char* s) : Value(std::string(s)) {}   // NOLINT
  Value(List l, bool tuple = false);                // NOLINT
  static Value dict(std::shared_ptr<Dict> d);
  static Value callable(Function f, std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
  const std::string& str() const { return s_; }  // string payload; undefined: its hint
  const List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  const Function& function() const { return *fn_; }
  const std::string& callable_name() const { return s_; }

  bool truthy() const;            // Python bool()
  std::string to_str() const;     // Python str(): what {{ x }} prints
  std::string repr() const;       // Python repr(): how containers print their items
  std::string type_name() const;  // for error messages, in Python's words

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Insertion-ordered string-keyed map. Dicts in chat templates are small (a message,
// a tool schema), so a linear scan beats hashing and keeps Python's order for free.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // only namespace() objects accept `set ns.x = ...`
  bool is_loop = false;       // the `loop` object of a for statement

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Python semantics for ==, <, and `in`. compare() fails on unorderable types as Python does.
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);

// Python float repr (shortest round-trip digits, 1e+16 / 1e-05 switch points).
std::string format_float(double f);
std::string py_repr_string(std::string_view s);

// JSON bridge: messages come in as ordered JSON (key order matters for tojson and
// dictsort-free iteration); tojson writes json.dumps(ensure_ascii=False) text.
Value from_json(const nlohmann::ordered_json& j);
struct JsonDumpOptions {
  int indent = -1;  // < 0: single line with ", " and ": " separators (json.dumps default)
  bool sort_keys = false;
  std::string item_sep;  // empty: json.dumps default for the indent mode
  std::string key_sep;
};
std::string to_json(const Value& v, const JsonDumpOptions& opt);

// UTF-8 helpers: Python strings index by code point.
std::vector<std::string_view> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);

}  // namespace minfer::chat_template
