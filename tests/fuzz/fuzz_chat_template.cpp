// Fuzz target (stage 5): Template::compile + render on arbitrary template text, over a
// fixed conversation (system, user, assistant with a tool call, tool, user), the BOS/EOS
// texts, tools, add_generation_prompt and a pinned clock.
// Invariants under test: compiling and rendering never crash, never hang and never
// read out of bounds; any text is either a render or an error (a construct we do not
// support is an error, as is raise_exception()).
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string_view>

#include "chat/template/template.h"

namespace {

using minfer::chat_template::ChatContext;
using minfer::chat_template::Template;
using Json = nlohmann::ordered_json;

const ChatContext& context() {
  static const ChatContext ctx = [] {
    ChatContext c;
    c.messages = Json::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? <b>é</b>"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"id": "call_12345", "type": "function",
                       "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "tool_call_id": "call_12345", "content": "4"},
      {"role": "assistant", "content": "4"},
      {"role": "user", "content": "And 3+3?"}
    ])");
    c.add_generation_prompt = true;
    c.bos_token = "<s>";
    c.eos_token = "</s>";
    c.extra = Json::parse(R"({"tools": [{"type": "function", "function": {"name": "add",
      "description": "Adds.", "parameters": {"type": "object", "properties":
      {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}],
      "enable_thinking": false})");
    std::tm now{};
    now.tm_year = 125;
    now.tm_mon = 2;
    now.tm_mday = 7;
    c.now = now;
    return c;
  }();
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = Template::compile(source);
  if (!t.ok()) return 0;
  (void)t->render(context());
  return 0;
}
