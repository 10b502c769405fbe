// Stage 16 (sessions): the ChatRenderer over src/chat/template's Jinja interpreter —
// the one adapter between a conversation and the model's own chat template. The
// template is compiled once and rendered every turn.
#include <optional>

#include "chat/renderer.h"

#ifdef MINFER_HAVE_CHAT_TEMPLATE
#include "chat/template/template.h"
#endif

namespace minfer::chat {
namespace {

#ifdef MINFER_HAVE_CHAT_TEMPLATE
class TemplateRenderer final : public ChatRenderer {
 public:
  explicit TemplateRenderer(TemplateSpec spec) : spec_(std::move(spec)) {
    auto t = chat_template::Template::compile(spec_.source);
    if (t) {
      compiled_.emplace(std::move(*t));
    } else {
      compile_error_ = t.error();
    }
  }
  Result<std::string> render(std::span<const Message> messages,
                             bool add_generation_prompt) const override {
    if (!compiled_) return compile_error_;
    chat_template::ChatContext ctx;
    ctx.messages = to_json(messages);
    ctx.add_generation_prompt = add_generation_prompt;
    ctx.bos_token = spec_.bos_token;
    ctx.eos_token = spec_.eos_token;
    if (spec_.kwargs.is_object()) ctx.extra = spec_.kwargs;
    return compiled_->render(ctx);
  }
  using ChatRenderer::render_json;
  Result<std::string> render_json(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                  const nlohmann::ordered_json& vars) const override {
    if (!compiled_) return compile_error_;
    chat_template::ChatContext ctx;
    ctx.messages = messages;
    ctx.add_generation_prompt = add_generation_prompt;
    ctx.bos_token = spec_.bos_token;
    ctx.eos_token = spec_.eos_token;
    if (spec_.kwargs.is_object()) ctx.extra = spec_.kwargs;
    if (vars.is_object()) {
      for (const auto& [k, v] : vars.items()) ctx.extra[k] = v;
    }
    if (!tools.is_null()) ctx.extra["tools"] = tools;
    return compiled_->render(ctx);
  }
  std::string name() const override { return "model template"; }
  std::string_view source() const override { return spec_.source; }

 private:
  TemplateSpec spec_;
  std::optional<chat_template::Template> compiled_;
  Error compile_error_;
};
#else
// Built without src/chat/template: every render is a loud refusal, never a silent
// switch to another format.
class TemplateRenderer final : public ChatRenderer {
 public:
  explicit TemplateRenderer(TemplateSpec) {}
  Result<std::string> render(std::span<const Message>, bool) const override {
    return make_error("this build has no Jinja chat-template interpreter (src/chat/template)");
  }
  using ChatRenderer::render_json;
  Result<std::string> render_json(const nlohmann::ordered_json&, const nlohmann::ordered_json&,
                                  bool, const nlohmann::ordered_json&) const override {
    return make_error("this build has no Jinja chat-template interpreter (src/chat/template)");
  }
  std::string name() const override { return "model template"; }
};
#endif

}  // namespace

std::unique_ptr<ChatRenderer> make_template_renderer(TemplateSpec spec) {
  return std::make_unique<TemplateRenderer>(std::move(spec));
}

}  // namespace minfer::chat
