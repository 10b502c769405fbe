// Stage 18 (CLI): `minfer template (MODEL | --template FILE) --messages FILE.json
// [--add-generation-prompt] [--bos TEXT] [--eos TEXT]` — prints the exact text a chat
// template renders for a conversation (no trailing newline added), so a render can be
// diffed against transformers' apply_chat_template byte for byte.
#include <fmt/core.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "args.h"
#include "chat/renderer.h"
#include "chat/template/template.h"
#include "commands.h"
#include "files.h"
#include "gguf/gguf.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

// A special token's text from the GGUF vocabulary, by the id stored under `key`.
std::optional<std::string> token_text(const gguf::Model& m, const char* key) {
  auto id = m.get_u64(key);
  if (!id) return std::nullopt;
  auto tokens = m.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || *id >= tokens->size()) return std::nullopt;
  return (*tokens)[*id];
}

}  // namespace

int run_template(const std::vector<std::string>& args) {
  ArgParser p("minfer template (MODEL | --template FILE) --messages FILE.json [flags]");
  std::string template_file, messages_file;
  std::optional<std::string> bos, eos;
  bool add_generation_prompt = false;
  p.string_opt("--template", "FILE", "Jinja template file (instead of a model)", template_file);
  p.string_opt("--messages", "FILE", "JSON array of {role, content} (required)", messages_file);
  p.flag("--add-generation-prompt", "end with the assistant turn's opening",
         [&] { add_generation_prompt = true; });
  p.option("--bos", "TEXT", "bos_token text (default: the model's)", [&](const std::string& v) {
    bos = v;
    return Status(Ok{});
  });
  p.option("--eos", "TEXT", "eos_token text (default: the model's)", [&](const std::string& v) {
    eos = v;
    return Status(Ok{});
  });
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  const std::vector<std::string>& positionals = parsed.positionals;
  if (positionals.size() > 1) return fail("template: one MODEL at most");
  if (messages_file.empty()) return fail("template: --messages FILE.json is required");
  if (positionals.empty() == template_file.empty()) {
    return fail("give either a MODEL or --template FILE");
  }

  chat::TemplateSpec spec;
  if (!template_file.empty()) {
    auto src = read_input_file(template_file);
    if (!src) return fail(src.error().message);
    spec.source = std::move(*src);
  } else {
    auto path = resolve_model_path(positionals[0]);
    if (!path) return fail(path.error().message);
    if (auto st = check_model_file(*path); !st.ok()) return fail(st.error().message);
    auto m = gguf::Model::open(*path);
    if (!m) return fail(m.error().message);
    if (!m->has("tokenizer.chat_template")) {
      return fail("'" + *path + "' has no tokenizer.chat_template (use --template FILE)");
    }
    auto src = m->get_string("tokenizer.chat_template");
    if (!src) return fail(src.error().message);
    spec.source = std::move(*src);
    spec.bos_token = token_text(*m, "tokenizer.ggml.bos_token_id").value_or("");
    spec.eos_token = token_text(*m, "tokenizer.ggml.eos_token_id").value_or("");
  }
  if (bos) spec.bos_token = *bos;
  if (eos) spec.eos_token = *eos;

  auto text = read_input_file(messages_file);
  if (!text) return fail(text.error().message);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return fail(fmt::format("{}: {}", messages_file, e.what()));
  }
  if (!j.is_array()) return fail(messages_file + ": expected a JSON array of messages");
  // The messages go to the interpreter as written (tool calls and any other fields
  // included), not through the conversation's {role, content} pairs.
  chat_template::ChatContext ctx;
  ctx.messages = std::move(j);
  ctx.add_generation_prompt = add_generation_prompt;
  ctx.bos_token = spec.bos_token;
  ctx.eos_token = spec.eos_token;
  auto out = chat_template::render_chat_template(spec.source, ctx);
  if (!out) return fail(out.error().message);
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace minfer::cli
