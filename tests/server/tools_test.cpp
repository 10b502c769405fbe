// Stage 17 tests: OpenAI tools without a model — `tools` / `tool_choice` validation
// (bad ones are 400s naming the field), the call grammar of each format accepts the
// calls of the tools' schemas and nothing else, the output parser (whole and streamed
// byte by byte give the same split), and the prompt of a history with calls and tool
// results rendered through the real Qwen2.5 and Llama 3.1 templates (tests/data).
#include "server/tools.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "grammar/grammar.h"
#include "server/api.h"

namespace minfer::server {
namespace {

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                  "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "add",
   "parameters": {"type": "object", "$defs": {"n": {"type": "integer"}},
                  "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}},
                  "required": ["a", "b"]}}}])";

std::optional<ApiError> chat(const std::string& extra, CompletionRequest* out = nullptr) {
  CompletionRequest r;
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}])" +
                           (extra.empty() ? "" : ", " + extra) + "}";
  auto e = parse_completion(body, Endpoint::kChat, 1000, r);
  if (out) *out = r;
  return e;
}

std::string read(const std::string& name) {
  std::ifstream f(std::string(MINFER_TESTDATA_DIR) + "/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool matches(const std::string& gbnf, const std::string& text) {
  auto g = grammar::Grammar::parse(gbnf);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message) << "\n" << gbnf;
  if (!g.ok()) return false;
  auto m = grammar::Matcher::create(*g);
  EXPECT_TRUE(m.ok());
  return m->accept(text) && m->can_end();
}

TEST(Tools, bad_tools_and_tool_choice_are_400s_naming_the_field) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("tools": {})", "'tools' must be an array"},
      {R"("tools": [3])", "tools[0] must be an object"},
      {R"("tools": [{"type": "retrieval"}])", "tools[0].type"},
      {R"("tools": [{"type": "function"}])", "tools[0].function must be an object"},
      {R"("tools": [{"type": "function", "function": {}}])", "tools[0].function.name is required"},
      {R"("tools": [{"type": "function", "function": {"name": "a b"}}])", "'a b'"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])",
       "tools[0].function.parameters must be"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}])",
       "tools[0].function.parameters: JSON Schema: unsupported keyword 'not'"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}},
                    {"type": "function", "function": {"name": "f"}}])",
       "given twice"},
      {std::string(R"("tools": )") + kTools + R"(, "tool_choice": "sometimes")", "'sometimes'"},
      {std::string(R"("tools": )") + kTools +
           R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
       "'nope', which is not in 'tools'"},
      {std::string(R"("tools": )") + kTools + R"(, "tool_choice": 3)", "tool_choice"},
      {R"("tool_choice": "required")", "needs a non-empty 'tools'"},
      {std::string(R"("tools": )") + kTools + R"(, "parallel_tool_calls": "yes")",
       "parallel_tool_calls"},
  };
  for (const auto& [extra, needle] : cases) {
    auto e = chat(extra);
    ASSERT_TRUE(e.has_value()) << extra;
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find(needle), std::string::npos) << e->message << " | " << needle;
  }
  // History: an assistant call without a function name.
  CompletionRequest r;
  auto e = parse_completion(
      R"({"messages": [{"role": "user", "content": "hi"},
          {"role": "assistant", "content": null, "tool_calls": [{"id": "x"}]}]})",
      Endpoint::kChat, 1000, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("messages[1].tool_calls[0].function.name"), std::string::npos);
}

TEST(Tools, good_tools_fill_the_request) {
  CompletionRequest r;
  ASSERT_FALSE(chat(std::string(R"("tools": )") + kTools +
                        R"(, "tool_choice": {"type": "function", "function": {"name": "add"}})",
                    &r));
  ASSERT_EQ(r.tools.tools.size(), 2u);
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "add");
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_TRUE(r.tools.active());
  ASSERT_FALSE(chat(std::string(R"("tools": )") + kTools + R"(, "tool_choice": "none")", &r));
  EXPECT_FALSE(r.tools.active());
}

TEST(Tools, format_is_read_from_the_template) {
  EXPECT_EQ(tool_format(read("Qwen-Qwen2.5-7B-Instruct.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(tool_format(read("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")),
            ToolFormat::kHermes);
  EXPECT_EQ(tool_format(read("meta-llama-Llama-3.1-8B-Instruct.jinja")), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format(read("meta-llama-Llama-3.2-3B-Instruct.jinja")), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolFormat::kGeneric);
}

TEST(Tools, required_grammar_accepts_calls_of_the_schemas_only) {
  CompletionRequest r;
  ASSERT_FALSE(chat(std::string(R"("tools": )") + kTools + R"(, "tool_choice": "required")", &r));
  auto hermes = tool_grammar(r.tools, ToolFormat::kHermes);
  ASSERT_TRUE(hermes.ok()) << hermes.error().message;
  EXPECT_TRUE(matches(*hermes,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>"));
  EXPECT_TRUE(matches(*hermes,
                      "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}"
                      "</tool_call>"));
  EXPECT_FALSE(matches(*hermes,  // b must be an integer ($ref into the tool's own $defs)
                       "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": \"x\"}}"
                       "</tool_call>"));
  EXPECT_FALSE(matches(*hermes, "<tool_call>{\"name\": \"mul\", \"arguments\": {}}</tool_call>"));
  EXPECT_FALSE(matches(*hermes,
                       "Sure! <tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, "
                       "\"b\": 2}}</tool_call>"));
  auto llama = tool_grammar(r.tools, ToolFormat::kLlama3);
  ASSERT_TRUE(llama.ok());
  EXPECT_TRUE(matches(*llama, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"));
  EXPECT_FALSE(matches(*llama, "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
  auto generic = tool_grammar(r.tools, ToolFormat::kGeneric);
  ASSERT_TRUE(generic.ok());
  EXPECT_TRUE(matches(*generic,
                      "{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}}"));
  EXPECT_FALSE(matches(*generic, "{\"response\": \"hi\"}"));  // required: no plain answer

  // Named: only that function.
  ASSERT_FALSE(chat(std::string(R"("tools": )") + kTools +
                        R"(, "tool_choice": {"type": "function", "function": {"name": "add"}})",
                    &r));
  auto named = tool_grammar(r.tools, ToolFormat::kHermes);
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(matches(
      *named, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>"));
  EXPECT_FALSE(matches(*named,
                       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", "
                       "\"unit\": \"c\"}}</tool_call>"));

  // Auto: hermes and llama3 unconstrained; generic allows a plain answer.
  ASSERT_FALSE(chat(std::string(R"("tools": )") + kTools, &r));
  EXPECT_EQ(*tool_grammar(r.tools, ToolFormat::kHermes), "");
  EXPECT_EQ(*tool_grammar(r.tools, ToolFormat::kLlama3), "");
  EXPECT_TRUE(matches(*tool_grammar(r.tools, ToolFormat::kGeneric), "{\"response\": \"hi\"}"));
}

struct Split {
  std::string content;
  std::vector<ToolCall> calls;
};

Split parse(ToolFormat f, const std::string& text, bool bytewise) {
  ToolCallParser p(f, true);
  Split s;
  if (bytewise) {
    for (char c : text) s.content += p.feed(std::string_view(&c, 1));
  } else {
    s.content += p.feed(text);
  }
  s.content += p.finish();
  s.calls = p.calls();
  return s;
}

TEST(Tools, parser_splits_content_and_calls_whole_or_streamed) {
  struct Case {
    ToolFormat f;
    std::string text, content;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  };
  const Case cases[] = {
      {ToolFormat::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>",
       "Let me check.\n",
       {{"get_weather", "{\"city\":\"Paris\"}"}}},
      {ToolFormat::kHermes,
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", "
       "\"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
       "\n",
       {{"a", "{}"}, {"b", "{\"x\":1}"}}},
      // No closing tag but a whole call: still a call. A '<' that is not a tag: text.
      {ToolFormat::kHermes,
       "1 < 2 <tool_call>{\"name\": \"a\", \"arguments\": {}}",
       "1 < 2 ",
       {{"a", "{}"}}},
      // Not JSON inside the tags: returned as text, nothing dropped.
      {ToolFormat::kHermes,
       "<tool_call>oops</tool_call> done",
       "<tool_call>oops</tool_call> done",
       {}},
      {ToolFormat::kHermes,
       "<tool_call>{\"name\": \"a\", \"argu",
       "<tool_call>{\"name\": \"a\", \"argu",
       {}},
      {ToolFormat::kHermes, "plain answer <tool", "plain answer <tool", {}},
      {ToolFormat::kLlama3,
       "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
       "",
       {{"add", "{\"a\":1,\"b\":2}"}}},
      {ToolFormat::kLlama3,
       "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}",
       "",
       {{"add", "{\"a\":1}"}}},
      {ToolFormat::kLlama3, "The answer is {3}.", "The answer is {3}.", {}},
      // A '<' that could begin <|python_tag|> waits, then turns out to be text.
      {ToolFormat::kLlama3, "<b>bold</b> text", "<b>bold</b> text", {}},
      {ToolFormat::kLlama3, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {}},
      {ToolFormat::kGeneric,
       "{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 1}}}",
       "",
       {{"add", "{\"a\":1}"}}},
      {ToolFormat::kGeneric, "{\"response\": \"Hello!\"}", "Hello!", {}},
      {ToolFormat::kGeneric,
       "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": "
       "{}}]}",
       "",
       {{"a", "{}"}, {"b", "{}"}}},
  };
  for (const Case& c : cases) {
    for (bool bytewise : {false, true}) {
      const Split s = parse(c.f, c.text, bytewise);
      EXPECT_EQ(s.content, c.content) << c.text << " bytewise " << bytewise;
      ASSERT_EQ(s.calls.size(), c.calls.size()) << c.text;
      for (size_t i = 0; i < c.calls.size(); ++i) {
        EXPECT_EQ(s.calls[i].name, c.calls[i].first);
        EXPECT_EQ(s.calls[i].arguments, c.calls[i].second);
        EXPECT_TRUE(s.calls[i].id.starts_with("call_")) << s.calls[i].id;
        EXPECT_EQ(s.calls[i].id.size(), 5u + 24u);
      }
    }
  }
  // Streaming never sends text that turns out to be part of a call.
  ToolCallParser p(ToolFormat::kHermes, true);
  std::string sent;
  for (const char* piece :
       {"Hi <", "tool_", "call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"}) {
    sent += p.feed(piece);
  }
  EXPECT_EQ(sent, "Hi ");
  // Inactive (tool_choice none): everything is content, at once.
  ToolCallParser off(ToolFormat::kHermes, false);
  EXPECT_EQ(off.feed("<tool_call>{}</tool_call>"), "<tool_call>{}</tool_call>");
}

const char* kHistory = R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"}])";

Result<std::string> render_history(const std::string& tmpl, ToolFormat f) {
  CompletionRequest r;
  const std::string body =
      std::string(R"({"messages": )") + kHistory + R"(, "tools": )" + kTools + "}";
  auto e = parse_completion(body, Endpoint::kChat, 1000, r);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  EXPECT_TRUE(r.tool_history);
  auto renderer =
      chat::make_template_renderer({.source = tmpl, .bos_token = "<s>", .eos_token = "</s>"});
  return render_tool_prompt(*renderer, r.messages_json, r.tools, f);
}

TEST(Tools, history_with_calls_and_results_renders_through_the_templates) {
  auto qwen = render_history(read("Qwen-Qwen2.5-7B-Instruct.jinja"), ToolFormat::kHermes);
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  // The tools in the system turn, the call as the template writes it (arguments an
  // object, not a quoted string), the result in <tool_response>, then the new turn.
  EXPECT_NE(
      qwen->find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
      std::string::npos)
      << *qwen;
  EXPECT_NE(qwen->find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"
                       "<|im_end|>"),
            std::string::npos)
      << *qwen;
  EXPECT_NE(qwen->find("<|im_start|>user\n<tool_response>\n21 C, sunny\n</tool_response><|im_end|>"
                       "\n<|im_start|>assistant\n"),
            std::string::npos)
      << *qwen;

  auto llama = render_history(read("meta-llama-Llama-3.1-8B-Instruct.jinja"), ToolFormat::kLlama3);
  ASSERT_TRUE(llama.ok()) << llama.error().message;
  EXPECT_NE(llama->find("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", "
                        "\"unit\": \"c\"}}<|eot_id|>"),
            std::string::npos)
      << *llama;
  EXPECT_NE(llama->find("<|start_header_id|>ipython<|end_header_id|>\n\n\"21 C, sunny\"<|eot_id|>"),
            std::string::npos)
      << *llama;

  // Generic: the call becomes the JSON answer the model would have written, and the
  // system turn carries the tools.
  auto generic = render_history(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}",
      ToolFormat::kGeneric);
  ASSERT_TRUE(generic.ok()) << generic.error().message;
  EXPECT_TRUE(generic->starts_with("<system>You can call tools.")) << *generic;
  EXPECT_NE(
      generic->find("<assistant>{\"tool_call\":{\"name\":\"get_weather\",\"arguments\":{"
                    "\"city\":\"Paris\",\"unit\":\"c\"}}}</assistant><tool>21 C, sunny</tool>"),
      std::string::npos)
      << *generic;
}

}  // namespace
}  // namespace minfer::server
