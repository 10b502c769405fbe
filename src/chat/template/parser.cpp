// Stage 5 (messages → text): recursive-descent parser, one function per jinja2 grammar
// level (condexpr → or → and → not → compare → math1 → concat → math2 → pow → unary →
// postfix/filters). Invariant: precedence equals jinja2's, e.g. `a + b | f` = a + (b|f).
#include "chat/template/parser.h"

#include <initializer_list>

namespace minfer::chat_template {
namespace {

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().kind != TokKind::kEof) error("unexpected '" + cur().text + "'");
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  [[noreturn]] void error(const std::string& msg) const {
    throw ParseError("line " + std::to_string(cur().line) + ": " + msg);
  }
  bool is_op(const char* op) const { return cur().kind == TokKind::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == TokKind::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got '" + cur().text + "'");
  }
  std::string expect_name() {
    if (cur().kind != TokKind::kName) error("expected a name, got '" + cur().text + "'");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokKind::kBlockEnd)
      error("expected end of statement block, got '" + cur().text + "'");
    advance();
  }
  ExprPtr node(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = cur().line;
    return e;
  }

  // Parses statements until a block tag whose name is in `end`; leaves the parser on
  // that name (after "{%").
  Body subparse(std::initializer_list<const char*> end) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.kind == TokKind::kEof) {
        if (end.size() != 0)
          error(std::string("unexpected end of template, expected '") + *end.begin() + "'");
        return body;
      }
      if (tok.kind == TokKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        advance();
      } else if (tok.kind == TokKind::kVarBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = tok.line;
        s->expr = parse_tuple(true);
        if (cur().kind != TokKind::kVarEnd) error("expected '}}', got '" + cur().text + "'");
        advance();
        body.push_back(std::move(s));
      } else if (tok.kind == TokKind::kBlockBegin) {
        advance();
        for (const char* e : end)
          if (is_name(e)) return body;
        body.push_back(parse_statement());
      } else {
        error("unexpected token '" + tok.text + "'");
      }
    }
  }

  StmtPtr parse_statement() {
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    if (cur().kind != TokKind::kName) error("expected a statement name, got '" + cur().text + "'");
    std::string tag = cur().text;
    advance();
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      ExprPtr cond = parse_tuple(false);
      expect_block_end();
      Body b = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(b));
      while (true) {
        if (skip_name("elif")) {
          ExprPtr c = parse_tuple(false);
          expect_block_end();
          Body eb = subparse({"elif", "else", "endif"});
          s->branches.emplace_back(std::move(c), std::move(eb));
        } else if (skip_name("else")) {
          expect_block_end();
          s->else_body = subparse({"endif"});
        } else {
          advance();  // endif
          expect_block_end();
          break;
        }
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets = parse_targets();
      if (!skip_name("in")) error("expected 'in' in for statement");
      s->expr = parse_tuple(false);
      if (skip_name("if")) s->cond = parse_tuple(true);
      if (is_name("recursive")) error("unsupported template feature: recursive for loops");
      expect_block_end();
      s->body = subparse({"endfor", "else"});
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = subparse({"endfor"});
      }
      advance();
      expect_block_end();
    } else if (tag == "set") {
      std::string first = expect_name();
      if (skip_op(".")) {
        s->kind = Stmt::Kind::kSetAttr;
        s->targets = {first};
        s->text = expect_name();
        expect_op("=");
        s->expr = parse_tuple(true);
        expect_block_end();
      } else {
        s->targets = {first};
        while (skip_op(",")) s->targets.push_back(expect_name());
        if (skip_op("=")) {
          s->kind = Stmt::Kind::kSet;
          s->expr = parse_tuple(true);
          expect_block_end();
        } else {
          if (is_op("|")) error("unsupported template feature: filtered block set");
          if (s->targets.size() != 1) error("block set takes a single name");
          s->kind = Stmt::Kind::kSetBlock;
          expect_block_end();
          s->body = subparse({"endset"});
          advance();
          expect_block_end();
        }
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->text = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (skip_op(")")) break;
        MacroParam p{.name = expect_name(), .default_value = nullptr};
        if (skip_op("=")) p.default_value = parse_expression(true);
        s->params.push_back(std::move(p));
      }
      expect_block_end();
      s->body = subparse({"endmacro"});
      advance();
      if (cur().kind == TokKind::kName) advance();  // {% endmacro name %}
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
    } else if (tag == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      s->kind = Stmt::Kind::kScope;
      expect_block_end();
      s->body = subparse({"endgeneration"});
      advance();
      expect_block_end();
    } else {
      error("unsupported template tag '" + tag + "'");
    }
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) names.push_back(expect_name());
    if (paren) expect_op(")");
    return names;
  }

  // Expression lists: `a, b` is a tuple; in `{{ }}` and `set` a bare list is allowed.
  ExprPtr parse_tuple(bool with_condexpr) {
    int line = cur().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::kTuple);
    t->line = line;
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokKind::kBlockEnd || cur().kind == TokKind::kVarEnd) break;
      t->args.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = node(Expr::Kind::kCond);
      c->a = parse_or();
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_condexpr();
      e = std::move(c);
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (skip_name("or")) {
      auto n = node(Expr::Kind::kOr);
      n->a = std::move(e);
      n->b = parse_and();
      e = std::move(n);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (skip_name("and")) {
      auto n = node(Expr::Kind::kAnd);
      n->a = std::move(e);
      n->b = parse_not();
      e = std::move(n);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto n = node(Expr::Kind::kUnary);
      advance();
      n->name = "not";
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    auto n = node(Expr::Kind::kBinary);
    n->name = std::move(op);
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    int n_ops = 0;
    while (true) {
      std::string op;
      if (cur().kind == TokKind::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (++n_ops > 1) error("unsupported template feature: chained comparison");
      e = binary(op, std::move(e), parse_math1());
    }
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      advance();
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (skip_op("~")) e = binary("~", std::move(e), parse_math2());
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      advance();
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (skip_op("**")) e = binary("**", std::move(e), parse_unary(true));
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::kUnary);
      e->name = cur().text;
      advance();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    if (tok.kind == TokKind::kName) {
      auto e = node(Expr::Kind::kLiteral);
      if (tok.text == "true" || tok.text == "True")
        e->value = Value(true);
      else if (tok.text == "false" || tok.text == "False")
        e->value = Value(false);
      else if (tok.text == "none" || tok.text == "None")
        e->value = Value::none();
      else {
        e->kind = Expr::Kind::kName;
        e->name = tok.text;
      }
      advance();
      return e;
    }
    if (tok.kind == TokKind::kString) {
      auto e = node(Expr::Kind::kLiteral);
      std::string s;
      while (cur().kind == TokKind::kString) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      e->value = Value(std::move(s));
      return e;
    }
    if (tok.kind == TokKind::kInt || tok.kind == TokKind::kFloat) {
      auto e = node(Expr::Kind::kLiteral);
      e->value = tok.kind == TokKind::kInt ? Value(tok.int_value) : Value(tok.float_value);
      advance();
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) {
        auto t = node(Expr::Kind::kTuple);
        return t;
      }
      ExprPtr first = parse_expression(true);
      if (skip_op(")")) return first;
      auto t = node(Expr::Kind::kTuple);
      t->args.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        t->args.push_back(parse_expression(true));
      }
      expect_op(")");
      return t;
    }
    if (skip_op("[")) {
      auto l = node(Expr::Kind::kList);
      while (!skip_op("]")) {
        if (!l->args.empty()) expect_op(",");
        if (skip_op("]")) break;
        l->args.push_back(parse_expression(true));
      }
      return l;
    }
    if (skip_op("{")) {
      auto d = node(Expr::Kind::kDict);
      while (!skip_op("}")) {
        if (!d->args.empty()) expect_op(",");
        if (skip_op("}")) break;
        d->args.push_back(parse_expression(true));
        expect_op(":");
        d->args.push_back(parse_expression(true));
      }
      return d;
    }
    error("unexpected '" + tok.text + "' in expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        advance();
        if (cur().kind == TokKind::kInt) {  // `x.0` is a subscript
          auto n = node(Expr::Kind::kSubscript);
          n->a = std::move(e);
          n->b = node(Expr::Kind::kLiteral);
          n->b->value = Value(cur().int_value);
          advance();
          e = std::move(n);
          continue;
        }
        auto n = node(Expr::Kind::kAttr);
        n->name = expect_name();
        n->a = std::move(e);
        e = std::move(n);
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    ExprPtr parts[3];
    int n_colons = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        if (++n_colons > 2) error("too many ':' in subscript");
        continue;
      }
      if (parts[n_colons]) error("unexpected expression in subscript");
      parts[n_colons] = parse_expression(true);
      if (is_op(",")) error("unsupported template feature: tuple subscript");
    }
    advance();
    if (n_colons == 0) {
      if (!parts[0]) error("empty subscript");
      auto n = node(Expr::Kind::kSubscript);
      n->a = std::move(obj);
      n->b = std::move(parts[0]);
      return n;
    }
    auto n = node(Expr::Kind::kSlice);
    n->a = std::move(obj);
    n->b = std::move(parts[0]);
    n->c = std::move(parts[1]);
    n->d = std::move(parts[2]);
    return n;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!call.args.empty() || !call.kwargs.empty()) expect_op(",");
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**"))
        error("unsupported template feature: *args/**kwargs in a call");
      if (cur().kind == TokKind::kName && peek().kind == TokKind::kOp && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        call.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!call.kwargs.empty()) error("positional argument after keyword argument");
        call.args.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto n = node(Expr::Kind::kCall);
    n->a = std::move(callee);
    parse_call_args(*n);
    return n;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        auto f = node(Expr::Kind::kFilter);
        f->name = expect_name();
        while (skip_op(".")) f->name += "." + expect_name();
        f->a = std::move(e);
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (skip_name("is")) {
        auto t = node(Expr::Kind::kTest);
        t->negated = skip_name("not");
        t->name = expect_name();
        while (skip_op(".")) t->name += "." + expect_name();
        t->a = std::move(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().kind == TokKind::kName && cur().text != "else" && cur().text != "or" &&
                    cur().text != "and" && cur().text != "if" && cur().text != "is" &&
                    cur().text != "in" && cur().text != "not") ||
                   cur().kind == TokKind::kString || cur().kind == TokKind::kInt ||
                   cur().kind == TokKind::kFloat || is_op("[") || is_op("{")) {
          // `x is divisibleby 3`: one argument without parentheses.
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens) {
  try {
    return Parser(tokens).parse_all();
  } catch (const ParseError& e) {
    return make_error(e.what());
  }
}

}  // namespace minfer::chat_template
