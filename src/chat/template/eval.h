// Stage 5 (messages → text): the tree-walking evaluator.
// Invariants: scoping follows jinja2 (for-loop bodies and macros get fresh scopes, `if`
// does not; a macro sees the template's top level at call time plus its arguments);
// output text is appended in order; failures throw TemplateError with a line number.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/template/ast.h"

namespace minfer::chat_template {

class Interpreter {
 public:
  // `globals` holds the render variables; builtins (range, namespace, ...) are added.
  Interpreter(std::unordered_map<std::string, Value> globals, std::tm now);
  std::string render(const Body& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value call(const Expr& e);
  Value call_macro(const Stmt& macro, CallArgs& args);
  CallArgs eval_args(const Expr& e);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) {
    scopes_.back()->insert_or_assign(name, std::move(v));
  }
  void install_builtins();

  std::vector<std::shared_ptr<Scope>> scopes_;
  std::tm now_;
  int depth_ = 0;
  bool error_located_ = false;
};

}  // namespace minfer::chat_template
