// Stage 16 (sessions): message JSON and the built-in ChatML renderer.
#include "chat/renderer.h"

#include <fmt/format.h>

#include "chat/builtin_templates.h"

namespace minfer::chat {

nlohmann::ordered_json to_json(std::span<const Message> messages) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const Message& m : messages) {
    j.push_back(nlohmann::ordered_json{{"role", m.role}, {"content", m.content}});
  }
  return j;
}

Result<std::vector<Message>> messages_from_json(const nlohmann::ordered_json& j) {
  if (!j.is_array()) return make_error("messages: expected a JSON array of {role, content}");
  std::vector<Message> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return make_error(fmt::format("messages[{}]: expected an object with a string \"role\"", i));
    }
    Message msg{.role = m["role"].get<std::string>(), .content = {}};
    if (m.contains("content") && !m["content"].is_null()) {
      if (!m["content"].is_string()) {
        return make_error(fmt::format("messages[{}].content: expected a string", i));
      }
      msg.content = m["content"].get<std::string>();
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Result<std::string> ChatMlRenderer::render(std::span<const Message> messages,
                                           bool add_generation_prompt) const {
  std::string out;
  for (const Message& m : messages) {
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

Result<std::string> ChatMlRenderer::render_json(const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& /*tools*/,
                                                bool add_generation_prompt,
                                                const nlohmann::ordered_json& /*vars*/) const {
  MINFER_TRY(std::vector<Message> m, messages_from_json(messages));
  return render(m, add_generation_prompt);
}

Status validate_renderer(const ChatRenderer& renderer) {
  const std::vector<Message> example = {{.role = "system", .content = "s"},
                                        {.role = "user", .content = "u"},
                                        {.role = "assistant", .content = "a"},
                                        {.role = "user", .content = "v"}};
  auto r = renderer.render(example, true);
  if (!r) return r.error().context("the chat template cannot be rendered");
  return Ok{};
}

RendererChoice renderer_for(const tokenizer::Tokenizer& tok, std::string template_source,
                            nlohmann::ordered_json kwargs) {
  if (template_source.empty()) template_source = tok.chat_template();
  bool fallback = false;
  std::string_view fallback_name;
  if (template_source.empty()) {
    // A vocabulary with Gemma's turn tokens is a Gemma model: its own turn format, not
    // ChatML (whose <|im_start|> would be plain text to it).
    if (tok.find_token("<start_of_turn>") == tokenizer::kNoToken ||
        tok.find_token("<end_of_turn>") == tokenizer::kNoToken) {
      return {.renderer = std::make_unique<ChatMlRenderer>(), .fallback = true};
    }
    template_source = std::string(kGemma3Template);
    fallback = true;
    fallback_name = "the built-in Gemma 3 template";
  }
  const tokenizer::SpecialIds& sp = tok.special();
  TemplateSpec spec{.source = std::move(template_source), .kwargs = std::move(kwargs)};
  if (sp.bos != tokenizer::kNoToken) spec.bos_token = tok.token_text(sp.bos);
  if (sp.eos != tokenizer::kNoToken) spec.eos_token = tok.token_text(sp.eos);
  RendererChoice choice{.renderer = make_template_renderer(std::move(spec)), .fallback = fallback};
  if (fallback) choice.fallback_name = fallback_name;
  return choice;
}

ThinkingPlan plan_thinking(std::string_view template_source, std::string& prompt, int32_t budget,
                           bool constrained) {
  constexpr std::string_view kOpen = "<think>";
  constexpr std::string_view kClose = "</think>";
  std::string_view trimmed = prompt;
  while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\n' ||
                              trimmed.back() == '\r' || trimmed.back() == '\t')) {
    trimmed.remove_suffix(1);
  }
  const bool forced_open = trimmed.ends_with(kOpen);
  const bool has_block = forced_open || template_source.find(kClose) != std::string_view::npos;
  if (!has_block || trimmed.ends_with(kClose)) return {};
  if (budget == 0) {
    prompt += forced_open ? "\n</think>\n\n" : "<think>\n\n</think>\n\n";
    return {};
  }
  if (!forced_open && constrained) {
    prompt += "<think>\n";
    return {.track = true, .forced_open = true};
  }
  return {.track = true, .forced_open = forced_open};
}

Result<engine::ReasoningOptions> reasoning_options(const ThinkingPlan& plan,
                                                   const tokenizer::Tokenizer& tok, bool split,
                                                   int32_t budget) {
  if (!plan.track) return engine::ReasoningOptions{};
  auto close = tok.encode(kThinkingClose, {.add_special = false, .parse_special = true});
  if (!close) {
    return make_error("cannot tokenize the thinking block's close tag: " + close.error().message);
  }
  return engine::ReasoningOptions{.track = true,
                                  .split = split,
                                  .forced_open = plan.forced_open,
                                  .budget = budget,
                                  .close_tokens = std::move(*close)};
}

Result<std::vector<tokenizer::TokenId>> tokenize_prompt(const tokenizer::Tokenizer& tok,
                                                        const std::string& text) {
  const tokenizer::SpecialIds& sp = tok.special();
  bool add_special = true;
  if (sp.add_bos && sp.bos != tokenizer::kNoToken) {
    const std::string& bos = tok.token_text(sp.bos);
    if (!bos.empty() && text.starts_with(bos)) add_special = false;
  }
  return tok.encode(text, {.add_special = add_special, .parse_special = true});
}

}  // namespace minfer::chat
