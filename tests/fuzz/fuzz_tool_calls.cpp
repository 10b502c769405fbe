// Fuzz target (stage 17): OpenAI tool calling on arbitrary bytes — the request side
// (`tools` / `tool_choice` in a chat body, the grammar built from them) and the output
// side (the parser that splits a model's text into content and tool calls).
// Input: byte 0 picks the mode; mode 0..2: the rest is model output for the hermes /
// llama3 / generic parser, fed whole and again in chunks of byte 1's size (1..16); mode
// 3: the rest is a /v1/chat/completions body.
// Invariants under test: nothing crashes, hangs or reads out of bounds; the split does
// not depend on how the text is chunked; every call's arguments are the JSON text of an object; for
// an accepted body, the tool grammar (when there is one) parses.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/check.h"
#include "grammar/grammar.h"
#include "server/api.h"
#include "server/tools.h"

using namespace minfer;
using server::ToolFormat;

namespace {

struct Split {
  std::string content;
  std::vector<server::ToolCall> calls;
};

Split run(ToolFormat f, std::string_view text, size_t chunk) {
  server::ToolCallParser p(f, true);
  Split s;
  for (size_t at = 0; at < text.size(); at += chunk) s.content += p.feed(text.substr(at, chunk));
  s.content += p.finish();
  s.calls = p.calls();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] % 4;
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  if (mode < 3) {
    const auto f = static_cast<ToolFormat>(mode);
    const Split whole = run(f, rest, rest.size() + 1);
    const Split chunked = run(f, rest, 1 + data[1] % 16);
    MINFER_CHECK(whole.content == chunked.content, "content depends on chunking");
    MINFER_CHECK(whole.calls.size() == chunked.calls.size(), "calls depend on chunking");
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      MINFER_CHECK(whole.calls[i].name == chunked.calls[i].name &&
                       whole.calls[i].arguments == chunked.calls[i].arguments,
                   "a call depends on chunking");
      const auto a = nlohmann::json::parse(whole.calls[i].arguments, nullptr, false);
      MINFER_CHECK(a.is_object(), "arguments are not a JSON object: %s",
                   whole.calls[i].arguments.c_str());
    }
    return 0;
  }
  server::CompletionRequest r;
  if (server::parse_completion(std::string(rest), server::Endpoint::kChat, 1000, r)) return 0;
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kGeneric}) {
    auto g = server::tool_grammar(r.tools, f);
    if (!g.ok() || g->empty()) continue;
    auto parsed = grammar::Grammar::parse(*g);
    MINFER_CHECK(parsed.ok(), "tool grammar does not parse: %s\n%s",
                 parsed.ok() ? "" : parsed.error().message.c_str(), g->c_str());
  }
  return 0;
}
