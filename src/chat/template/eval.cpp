// Stage 5 (messages → text): statements, expressions, macros and the globals jinja2 /
// transformers provide (range, namespace, dict, raise_exception, strftime_now).
// Invariant: Python operator semantics (int/float promotion, floor division, str/list
// concatenation) and jinja2's Undefined rules (prints empty, fails on use).
#include "chat/template/eval.h"

#include <cmath>

#include "chat/template/builtins.h"

namespace minfer::chat_template {
namespace {

constexpr int kMaxCallDepth = 200;  // macro recursion guard (jinja2 would hit Python's limit)

[[noreturn]] void fail_undefined(const Value& v, const std::string& what) {
  fail(v.str().empty() ? what + " of an undefined value" : v.str());
}

int64_t as_i(const Value& v) {
  return v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
}
bool int_like(const Value& v) {
  return v.is_int() || v.is_bool();
}
bool num_like(const Value& v) {
  return v.is_number() || v.is_bool();
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(out);
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value(std::move(out), seq.is_tuple());
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj, "slice");
  auto opt_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!int_like(v)) fail(std::string("slice ") + what + " must be an integer or None");
    return as_i(v);
  };
  std::vector<std::string_view> chars;
  size_t n_items = 0;
  if (obj.is_string()) {
    chars = utf8_chars(obj.str());
    n_items = chars.size();
  } else if (obj.is_list()) {
    n_items = obj.list().size();
  } else {
    fail("'" + obj.type_name() + "' object is not subscriptable");
  }
  auto n = static_cast<int64_t>(n_items);
  int64_t step = opt_int(step_v, "step").value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (x < 0) return step < 0 ? int64_t{-1} : int64_t{0};
    if (x >= n) return step < 0 ? n - 1 : n;
    return x;
  };
  int64_t start = adjust(opt_int(start_v, "start"), step < 0 ? n - 1 : 0);
  int64_t stop = adjust(opt_int(stop_v, "stop"), step < 0 ? -1 : n);
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    idx.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::string out;
    for (size_t i : idx) out += chars[i];
    return Value(out);
  }
  List out;
  for (size_t i : idx) out.push_back(obj.list()[i]);
  return Value(std::move(out), obj.is_tuple());
}

}  // namespace

Interpreter::Interpreter(std::unordered_map<std::string, Value> globals, std::tm now) : now_(now) {
  scopes_.push_back(std::make_shared<Scope>(std::move(globals)));
  install_builtins();
}

void Interpreter::install_builtins() {
  Scope& g = *scopes_.front();
  auto def = [&](const std::string& name, Function f) {
    if (!g.count(name)) g.emplace(name, Value::callable(std::move(f), name));
  };
  def("range", [](CallArgs& a) {
    if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
      fail("range() takes 1 to 3 positional arguments");
    for (const Value& v : a.pos)
      if (!int_like(v)) fail("range() arguments must be integers, not " + v.type_name());
    int64_t start = a.pos.size() == 1 ? 0 : as_i(a.pos[0]);
    int64_t stop = a.pos.size() == 1 ? as_i(a.pos[0]) : as_i(a.pos[1]);
    int64_t step = a.pos.size() == 3 ? as_i(a.pos[2]) : 1;
    if (step == 0) fail("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) fail("range() too large for a chat template (sandbox limit)");
      out.push_back(Value(i));
    }
    return Value(std::move(out));
  });
  auto make_dict = [](CallArgs& a, bool ns) {
    auto d = std::make_shared<Dict>();
    d->is_namespace = ns;
    for (const Value& p : a.pos) {
      if (!p.is_dict())
        fail(std::string(ns ? "namespace" : "dict") + "() positional argument must be a mapping");
      for (const auto& [k, v] : p.dict().items) d->set(k, v);
    }
    for (auto& [k, v] : a.kw) d->set(k, v);
    return Value::dict(std::move(d));
  };
  def("namespace", [make_dict](CallArgs& a) { return make_dict(a, true); });
  def("dict", [make_dict](CallArgs& a) { return make_dict(a, false); });
  def("raise_exception", [](CallArgs& a) -> Value {
    fail("raise_exception: " + (a.pos.empty() ? std::string() : a.pos[0].to_str()));
  });
  std::tm now = now_;
  def("strftime_now", [now](CallArgs& a) {
    auto p = bind_args("strftime_now", a, {{"format", Value()}});
    if (!p[0].is_string()) fail("strftime_now() needs a format string");
    char buf[512];
    size_t n = std::strftime(buf, sizeof buf, p[0].str().c_str(), &now);
    if (n == 0 && !p[0].str().empty())
      fail("strftime_now(): empty or oversized result for '" + p[0].str() + "'");
    return Value(std::string(buf, n));
  });
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  exec_body(body, out);
  return out;
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = (*it)->find(name);
    if (f != (*it)->end()) return f->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow f = exec(*s, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  try {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        break;
      case Stmt::Kind::kOutput:
        out += eval(*s.expr).to_str();
        break;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond).truthy()) return exec_body(body, out);
        return exec_body(s.else_body, out);
      case Stmt::Kind::kFor:
        exec_for(s, out);
        break;
      case Stmt::Kind::kSet: {
        Value v = eval(*s.expr);
        if (s.targets.size() == 1) {
          assign(s.targets[0], std::move(v));
        } else {
          List items = iterate(v);
          if (items.size() != s.targets.size())
            fail("cannot unpack " + std::to_string(items.size()) + " values into " +
                 std::to_string(s.targets.size()) + " names");
          for (size_t i = 0; i < items.size(); ++i) assign(s.targets[i], items[i]);
        }
        break;
      }
      case Stmt::Kind::kSetAttr: {
        Value obj = lookup(s.targets[0]);
        if (!obj.is_dict() || !obj.dict().is_namespace)
          fail("Cannot assign attribute on non-namespace object");
        obj.dict().set(s.text, eval(*s.expr));
        break;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        exec_body(s.body, captured);
        assign(s.targets[0], Value(captured));
        break;
      }
      case Stmt::Kind::kMacro: {
        const Stmt* macro = &s;
        assign(s.text, Value::callable([this, macro](CallArgs& a) { return call_macro(*macro, a); },
                                       s.text));
        break;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return exec_body(s.body, out);
    }
  } catch (const TemplateError& e) {
    if (error_located_) throw;
    error_located_ = true;
    throw TemplateError("line " + std::to_string(s.line) + ": " + e.what());
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s, std::string& out) {
  Value seq = eval(*s.expr);
  List items = iterate(seq);
  auto bind = [&](Scope& scope, const Value& item) {
    if (s.targets.size() == 1) {
      scope.insert_or_assign(s.targets[0], item);
      return;
    }
    List parts = iterate(item);
    if (parts.size() != s.targets.size())
      fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
           std::to_string(s.targets.size()) + " loop variables");
    for (size_t i = 0; i < parts.size(); ++i) scope.insert_or_assign(s.targets[i], parts[i]);
  };
  if (s.cond) {  // `for x in xs if cond`: filter first, so loop.length/last see the result
    List kept;
    for (const Value& item : items) {
      scopes_.push_back(std::make_shared<Scope>());
      bind(*scopes_.back(), item);
      bool keep = false;
      try {
        keep = eval(*s.cond).truthy();
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, out);
    return;
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    auto loop = std::make_shared<Dict>();
    loop->is_loop = true;
    loop->items = {{"index", Value(i + 1)},    {"index0", Value(i)},
                   {"revindex", Value(n - i)}, {"revindex0", Value(n - i - 1)},
                   {"first", Value(i == 0)},   {"last", Value(i == n - 1)},
                   {"length", Value(n)},       {"depth", Value(1)},
                   {"depth0", Value(0)}};
    if (i > 0) loop->items.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop->items.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    // A fresh scope per iteration: jinja2 forgets `set`s of the previous iteration.
    auto scope = std::make_shared<Scope>();
    scope->insert_or_assign("loop", Value::dict(std::move(loop)));
    bind(*scope, items[static_cast<size_t>(i)]);
    scopes_.push_back(std::move(scope));
    Flow f = Flow::kNormal;
    try {
      f = exec_body(s.body, out);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    if (f == Flow::kBreak) break;
  }
}

Value Interpreter::call_macro(const Stmt& m, CallArgs& a) {
  if (a.pos.size() > m.params.size())
    fail("macro '" + m.text + "' takes not more than " + std::to_string(m.params.size()) +
         " argument(s)");
  if (++depth_ > kMaxCallDepth)
    fail("macro recursion deeper than " + std::to_string(kMaxCallDepth));
  // The macro sees the template's top level (as it is now) and its own arguments.
  std::vector<std::shared_ptr<Scope>> saved = {scopes_.front(), std::make_shared<Scope>()};
  std::swap(saved, scopes_);
  std::string out;
  try {
    for (size_t i = 0; i < m.params.size(); ++i) {
      const MacroParam& p = m.params[i];
      const Value* kw = nullptr;
      for (const auto& [k, v] : a.kw)
        if (k == p.name) kw = &v;
      if (i < a.pos.size())
        assign(p.name, a.pos[i]);
      else if (kw)
        assign(p.name, *kw);
      else if (p.default_value)
        assign(p.name, eval(*p.default_value));
      else
        assign(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
    }
    for (const auto& [k, v] : a.kw) {
      bool known = false;
      for (const MacroParam& p : m.params) known = known || p.name == k;
      if (!known) fail("macro '" + m.text + "' takes no keyword argument '" + k + "'");
    }
    exec_body(m.body, out);
  } catch (...) {
    std::swap(saved, scopes_);
    --depth_;
    throw;
  }
  std::swap(saved, scopes_);
  --depth_;
  return Value(out);
}

CallArgs Interpreter::eval_args(const Expr& e) {
  CallArgs a;
  for (const ExprPtr& x : e.args) a.pos.push_back(eval(*x));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
  return a;
}

Value Interpreter::call(const Expr& e) {
  Value callee = eval(*e.a);
  if (callee.is_undefined()) {
    std::string what = e.a->kind == Expr::Kind::kName   ? "'" + e.a->name + "'"
                       : e.a->kind == Expr::Kind::kAttr ? "'" + e.a->name + "'"
                                                        : "callee";
    fail("unsupported template feature or undefined function: " + what + " (" + callee.str() + ")");
  }
  if (!callee.is_callable()) fail("'" + callee.type_name() + "' object is not callable");
  CallArgs a = eval_args(e);
  return callee.function()(a);
}

Value Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const ExprPtr& x : e.args) items.push_back(eval(*x));
      return Value(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (!k.is_string())
          fail("unsupported template feature: dict literal key of type " + k.type_name());
        d->set(k.str(), eval(*e.args[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kAttr:
      return get_attr(eval(*e.a), e.name);
    case Expr::Kind::kSubscript: {
      Value obj = eval(*e.a);
      return get_item(obj, eval(*e.b));
    }
    case Expr::Kind::kSlice: {
      Value obj = eval(*e.a);
      Value none = Value::none();
      return slice(obj, e.b ? eval(*e.b) : none, e.c ? eval(*e.c) : none, e.d ? eval(*e.d) : none);
    }
    case Expr::Kind::kCall:
      return call(e);
    case Expr::Kind::kFilter: {
      Value subject = eval(*e.a);
      CallArgs a = eval_args(e);
      return apply_filter(e.name, subject, a);
    }
    case Expr::Kind::kTest: {
      Value subject = eval(*e.a);
      CallArgs a = eval_args(e);
      return Value(apply_test(e.name, subject, a) != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.a);
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) fail_undefined(v, "unary " + e.name);
      if (!num_like(v)) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_float() ? v : Value(as_i(v));
      return v.is_float() ? Value(-v.as_float()) : Value(-as_i(v));
    }
    case Expr::Kind::kAnd: {
      Value l = eval(*e.a);
      return l.truthy() ? eval(*e.b) : l;
    }
    case Expr::Kind::kOr: {
      Value l = eval(*e.a);
      return l.truthy() ? l : eval(*e.b);
    }
    case Expr::Kind::kCond:
      if (eval(*e.a).truthy()) return eval(*e.b);
      return e.c ? eval(*e.c) : Value::undefined("the inline if had no else branch");
    case Expr::Kind::kBinary:
      return eval_binary(e);
  }
  fail("internal: unknown expression kind");
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  Value l = eval(*e.a);
  Value r = eval(*e.b);
  if (op == "~") return Value(l.to_str() + r.to_str());
  if (op == "==") return Value(equals(l, r));
  if (op == "!=") return Value(!equals(l, r));
  if (op == "in") return Value(contains(r, l));
  if (op == "not in") return Value(!contains(r, l));
  if (l.is_undefined()) fail_undefined(l, "operator " + op);
  if (r.is_undefined()) fail_undefined(r, "operator " + op);
  if (op == "<") return Value(compare(l, r) < 0);
  if (op == ">") return Value(compare(l, r) > 0);
  if (op == "<=") return Value(compare(l, r) <= 0);
  if (op == ">=") return Value(compare(l, r) >= 0);
  auto type_error = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" +
         r.type_name() + "'");
  };
  if (num_like(l) && num_like(r)) {
    bool ints = int_like(l) && int_like(r);
    if (op == "+") return ints ? Value(as_i(l) + as_i(r)) : Value(l.as_float() + r.as_float());
    if (op == "-") return ints ? Value(as_i(l) - as_i(r)) : Value(l.as_float() - r.as_float());
    if (op == "*") return ints ? Value(as_i(l) * as_i(r)) : Value(l.as_float() * r.as_float());
    double lf = l.is_bool() ? as_i(l) : l.as_float(), rf = r.is_bool() ? as_i(r) : r.as_float();
    if (op == "/") {
      if (rf == 0.0) fail("division by zero");
      return Value(lf / rf);
    }
    if (op == "//" || op == "%") {
      if (rf == 0.0) fail("integer division or modulo by zero");
      if (ints) {
        int64_t q = floor_div(as_i(l), as_i(r));
        return op == "//" ? Value(q) : Value(as_i(l) - q * as_i(r));
      }
      double q = std::floor(lf / rf);
      return op == "//" ? Value(q) : Value(lf - q * rf);
    }
    if (op == "**") {
      if (ints && as_i(r) >= 0) {
        int64_t acc = 1;
        for (int64_t i = 0; i < as_i(r); ++i) acc *= as_i(l);
        return Value(acc);
      }
      return Value(std::pow(lf, rf));
    }
    return type_error();
  }
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value(l.str() + r.str());
    if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple()) {
      List out = l.list();
      out.insert(out.end(), r.list().begin(), r.list().end());
      return Value(std::move(out), l.is_tuple());
    }
    if (l.is_string()) fail("can only concatenate str (not \"" + r.type_name() + "\") to str");
    return type_error();
  }
  if (op == "*") {
    if ((l.is_string() || l.is_list()) && int_like(r)) return repeat(l, as_i(r));
    if ((r.is_string() || r.is_list()) && int_like(l)) return repeat(r, as_i(l));
    return type_error();
  }
  if (op == "%" && l.is_string())
    fail("unsupported template feature: printf-style string formatting ('%')");
  return type_error();
}

}  // namespace minfer::chat_template
