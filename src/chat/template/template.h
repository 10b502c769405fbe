// Stage 5 (messages → text): render a GGUF `tokenizer.chat_template` (a Jinja template)
// over OpenAI-style messages, as transformers' apply_chat_template does.
// Invariants: the output equals Python jinja2 in transformers' setup
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, its tojson,
// raise_exception, strftime_now); a construct we do not support is an error naming it,
// never a different render; `raise_exception(msg)` in a template is an error with msg.
//
// Why hand-written: Debian packages no C++ Jinja engine (`apt-cache search jinja`
// lists only Python/Emacs/R/Rust-source packages), and inja (the usual C++ choice) is
// not Jinja-compatible enough for Hugging Face templates: it has no macros, no
// namespace(), no `is defined`-style tests, no slicing, no Python string methods and
// no trim_blocks/lstrip_blocks semantics equal to jinja2's.
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace minfer::chat_template {

struct Stmt;

struct ChatContext {
  // OpenAI-style list of {role, content, ...}; key order is kept (tojson prints it).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;  // absent → undefined in the template
  std::optional<std::string> eos_token;
  // Further variables (tools, enable_thinking, ...); a name absent here is undefined.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // strftime_now() clock; unset → the local time at render (tests pin it).
  std::optional<std::tm> now;
};

// A compiled template: parse once, render many times (each turn of a chat).
class Template {
 public:
  static Result<Template> compile(std::string_view source);
  Result<std::string> render(const ChatContext& ctx) const;
  // Generic form: every key of `vars` becomes a template variable.
  Result<std::string> render_vars(const nlohmann::ordered_json& vars,
                                  const std::optional<std::tm>& now) const;

 private:
  struct Program;
  std::shared_ptr<const Program> program_;
};

Result<std::string> render_chat_template(std::string_view tmpl, const ChatContext& ctx);

}  // namespace minfer::chat_template
