// Stage 5 (messages → text): the syntax tree the parser builds and the evaluator walks.
// Invariant: the tree is immutable after parsing; every node keeps its source line so
// render errors can name where they happened.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/template/value.h"

namespace minfer::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // args
    kTuple,      // args
    kDict,       // args: key, value, key, value...
    kAttr,       // a.name
    kSubscript,  // a[b]
    kSlice,      // a[b:c:d], each of b/c/d may be null
    kCall,       // a(args, kwargs)
    kFilter,     // a | name(args, kwargs); a is null inside a filter block (unsupported)
    kTest,       // a is [not] name(args)
    kUnary,      // name in {"-", "+", "not"}
    kBinary,     // a name b with name an arithmetic / comparison / concat operator
    kAnd,
    kOr,
    kCond,  // b if a else c (c may be null → undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;  // `is not`
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body); else_body
    kFor,       // targets in expr [if cond] body [else else_body]
    kSet,       // targets = expr
    kSetAttr,   // targets[0].attr = expr (namespace objects only)
    kSetBlock,  // {% set targets[0] %}body{% endset %}
    kMacro,     // name(params) body
    kBreak,
    kContinue,
    kScope,  // a body rendered in place: {% generation %} (transformers' assistant mask tag)
  };
  Kind kind;
  int line = 0;
  std::string text;  // kText; macro name; kSetAttr attribute
  ExprPtr expr;
  ExprPtr cond;  // for-loop filter
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<MacroParam> params;
};

}  // namespace minfer::chat_template
