// Stage 5 (messages → text): the public entry points — compile (lex + parse once) and
// render (fresh interpreter per render, so renders never share mutable state).
// Invariant: every failure leaves as Result, TemplateError never crosses this file.
#include "chat/template/template.h"

#include "chat/template/eval.h"
#include "chat/template/parser.h"

namespace minfer::chat_template {

struct Template::Program {
  Body body;
};

Result<Template> Template::compile(std::string_view source) {
  auto toks = lex(source);
  if (!toks.ok()) return toks.error().context("chat template");
  auto body = parse(toks.value());
  if (!body.ok()) return body.error().context("chat template");
  Template t;
  auto p = std::make_shared<Program>();
  p->body = std::move(body).value();
  t.program_ = std::move(p);
  return t;
}

Result<std::string> Template::render_vars(const nlohmann::ordered_json& vars,
                                          const std::optional<std::tm>& now) const {
  std::tm tm_now{};
  if (now) {
    tm_now = *now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm_now);  // transformers uses datetime.now(): local time
  }
  try {
    std::unordered_map<std::string, Value> globals;
    if (!vars.is_object()) return make_error("chat template: variables must be a JSON object");
    for (const auto& [k, v] : vars.items()) globals.insert_or_assign(k, from_json(v));
    Interpreter interp(std::move(globals), tm_now);
    return interp.render(program_->body);
  } catch (const TemplateError& e) {
    return make_error(std::string("chat template: ") + e.what());
  }
}

Result<std::string> Template::render(const ChatContext& ctx) const {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (const auto& [k, v] : ctx.extra.items()) vars[k] = v;
  vars["messages"] = ctx.messages;
  vars["add_generation_prompt"] = ctx.add_generation_prompt;
  if (ctx.bos_token) vars["bos_token"] = *ctx.bos_token;
  if (ctx.eos_token) vars["eos_token"] = *ctx.eos_token;
  return render_vars(vars, ctx.now);
}

Result<std::string> render_chat_template(std::string_view tmpl, const ChatContext& ctx) {
  MINFER_TRY(Template t, Template::compile(tmpl));
  return t.render(ctx);
}

}  // namespace minfer::chat_template
