// Stage 16 (sessions): the seam between a conversation and its chat template — a
// list of messages in, the exact prompt text out.
// Invariants: rendering is a pure function of (messages, add_generation_prompt); the
// conversation relies on it (a non-deterministic template shows up as a rewind, never
// as silently inconsistent KV). The ChatML renderer is the fallback for a model
// without `tokenizer.chat_template`, byte-identical to the common ChatML template.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace minfer::chat {

struct Message {
  std::string role;  // "system", "user", "assistant"
  std::string content;
  bool operator==(const Message&) const = default;
};

// OpenAI-style [{"role": ..., "content": ...}] (the shape of session files and of
// `minfer template --messages`).
nlohmann::ordered_json to_json(std::span<const Message> messages);
Result<std::vector<Message>> messages_from_json(const nlohmann::ordered_json& j);

class ChatRenderer {
 public:
  virtual ~ChatRenderer() = default;
  virtual Result<std::string> render(std::span<const Message> messages,
                                     bool add_generation_prompt) const = 0;
  // A one-word description for notices ("model template", "ChatML fallback").
  virtual std::string name() const = 0;
  // OpenAI-shaped messages as the template sees them (assistant `tool_calls`, tool
  // `tool_call_id` kept), the template's `tools` variable (null: left undefined) and
  // further variables `vars` (an object: a request's chat_template_kwargs, set over the
  // renderer's own kwargs). The ChatML renderer ignores the extras.
  virtual Result<std::string> render_json(const nlohmann::ordered_json& messages,
                                          const nlohmann::ordered_json& tools,
                                          bool add_generation_prompt,
                                          const nlohmann::ordered_json& vars) const = 0;
  Result<std::string> render_json(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt) const {
    return render_json(messages, tools, add_generation_prompt, nlohmann::ordered_json::object());
  }
  // The Jinja source ("" for the built-in ChatML): what the server reads the template's
  // tool-call format from.
  virtual std::string_view source() const { return {}; }
};

// <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, then <|im_start|>assistant\n.
class ChatMlRenderer final : public ChatRenderer {
 public:
  Result<std::string> render(std::span<const Message> messages,
                             bool add_generation_prompt) const override;
  std::string name() const override { return "ChatML fallback"; }
  using ChatRenderer::render_json;
  Result<std::string> render_json(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                  const nlohmann::ordered_json& vars) const override;
};

// A Jinja chat template (tokenizer.chat_template or a file) rendered by
// src/chat/template with the model's BOS/EOS texts.
struct TemplateSpec {
  std::string source;     // the template text
  std::string bos_token;  // text of the BOS token ("" if none)
  std::string eos_token;  // text of the EOS token
  // Extra template variables for every render (llama.cpp's --chat-template-kwargs), e.g.
  // {"enable_thinking": false} for Qwen3: a JSON object; its keys become variables.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};
std::unique_ptr<ChatRenderer> make_template_renderer(TemplateSpec spec);

// Renders once on an example conversation so a template the interpreter cannot run
// fails at startup, naming the construct, instead of at the first turn.
Status validate_renderer(const ChatRenderer& renderer);

// The renderer a model gets: its own tokenizer.chat_template (with its BOS/EOS token
// texts), or — when it has none — ChatML, with fallback = true so the CLI can say so.
// A non-empty `template_source` (a template file) replaces the model's.
struct RendererChoice {
  std::unique_ptr<ChatRenderer> renderer;
  bool fallback = false;  // the GGUF has no template: a built-in one is used
  std::string_view fallback_name = "the generic ChatML renderer";  // which, for the notice
};
RendererChoice renderer_for(const tokenizer::Tokenizer& tok, std::string template_source = {},
                            nlohmann::ordered_json kwargs = nlohmann::ordered_json::object());

// A rendered prompt's tokens: special-token text parsed as specials; BOS added when the
// vocabulary asks for it and the render does not already start with its text (a
// template that prints {{ bos_token }} must not get a second one).
Result<std::vector<tokenizer::TokenId>> tokenize_prompt(const tokenizer::Tokenizer& tok,
                                                        const std::string& text);

// A thinking block (`<think>…</think>`, DeepSeek-R1's and Qwen3's) in a rendered prompt,
// as the generation after it should treat it. The template has one when its source
// writes the close tag or the prompt ends with the open tag ("forced open": generation
// starts inside the block); a prompt that ends with a closed block (Qwen3 with
// enable_thinking false) has none left to track.
struct ThinkingPlan {
  bool track = false;        // the generation may hold a block (split it, bound it)
  bool forced_open = false;  // it starts inside the block
};
// `budget` 0 (no thinking) closes the block in the prompt itself, as Qwen3's template
// writes it for enable_thinking false; `constrained` (a grammar follows the block) opens
// it in the prompt where the model would open it, so the answer's start is never a
// guess. Appends to `prompt` accordingly.
ThinkingPlan plan_thinking(std::string_view template_source, std::string& prompt, int32_t budget,
                           bool constrained);
// The text a reasoning budget feeds to close the block: the tag with the newlines the
// templates above put around it.
inline constexpr std::string_view kThinkingClose = "\n</think>\n\n";
// The generation's reasoning options for a plan: nothing tracked when the plan has no
// block; otherwise tracked, split as asked, bounded by `budget` (-1: no limit) with
// kThinkingClose's tokens to close it. Error: the close tag does not tokenize.
Result<engine::ReasoningOptions> reasoning_options(const ThinkingPlan& plan,
                                                   const tokenizer::Tokenizer& tok, bool split,
                                                   int32_t budget);

}  // namespace minfer::chat
