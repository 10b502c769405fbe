// Stage 17 tests: request validation without a model — every malformed field is a 400
// naming the field, good requests fill the generation options, defaults are
// llama-server's.
#include "server/api.h"

#include <gtest/gtest.h>

#include <string>

namespace minfer::server {
namespace {

constexpr int32_t kVocab = 1000;

std::optional<ApiError> chat(const std::string& body, CompletionRequest* out = nullptr) {
  CompletionRequest r;
  auto e = parse_completion(body, Endpoint::kChat, kVocab, r);
  if (out) *out = r;
  return e;
}

std::optional<ApiError> comp(const std::string& body, CompletionRequest* out = nullptr) {
  CompletionRequest r;
  auto e = parse_completion(body, Endpoint::kCompletion, kVocab, r);
  if (out) *out = r;
  return e;
}

const std::string kMsg = R"("messages": [{"role": "user", "content": "hi"}])";

TEST(Api, bad_fields_are_400s_naming_the_field) {
  const std::pair<std::string, std::string> cases[] = {
      {"{", "JSON"},
      {"[]", "object"},
      {"{}", "messages"},
      {R"({"messages": []})", "empty"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "wizard"},
      {R"({"messages": [{"role": "user", "content": 3}]})", "content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "image_url"},
      {"{" + kMsg + R"(, "temperature": "hot"})", "temperature"},
      {"{" + kMsg + R"(, "temperature": 9})", "temperature"},
      {"{" + kMsg + R"(, "top_p": -1})", "top_p"},
      {"{" + kMsg + R"(, "top_k": 1.5})", "top_k"},
      {"{" + kMsg + R"(, "max_tokens": -2})", "max_tokens"},
      {"{" + kMsg + R"(, "n": 0})", "'n' must be in [1, 128]"},
      {"{" + kMsg + R"(, "stop": [1]})", "stop"},
      {"{" + kMsg + R"(, "seed": "x"})", "seed"},
      {"{" + kMsg + R"(, "logit_bias": {"1000": 1}})", "1000"},
      {"{" + kMsg + R"(, "logit_bias": {"7": 101}})", "logit_bias"},
      {"{" + kMsg + R"(, "top_logprobs": 3})", "logprobs"},
      {"{" + kMsg + R"(, "response_format": {"type": "yaml"}})", "yaml"},
      {"{" + kMsg + R"(, "grammar": "a", "json_schema": {"type": "object"}})", "one of"},
      {"{" + kMsg + R"(, "stream_options": 1})", "stream_options"},
      {"{" + kMsg + R"(, "speculative.n_max": -1})", "'speculative.n_max' must be in [0, 1024]"},
      {"{" + kMsg + R"(, "speculative.n_max": 1025})", "'speculative.n_max' must be in [0, 1024]"},
      {"{" + kMsg + R"(, "speculative.n_max": true})", "'speculative.n_max' must be an integer"},
      {"{" + kMsg + R"(, "speculative.n_min": 0.5})", "'speculative.n_min' must be an integer"},
      {"{" + kMsg + R"(, "speculative.p_min": -0.1})", "'speculative.p_min' must be in [0, 1]"},
      {"{" + kMsg + R"(, "speculative.n_max": 3, "speculative.n_min": 4})",
       "'speculative.n_min' (4) is above 'speculative.n_max' (3)"},
      {"{" + kMsg + R"(, "speculative": {"n_max": 3}})", "give 'speculative.n_max'"},
  };
  for (const auto& [body, word] : cases) {
    auto e = chat(body);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400) << body;
    EXPECT_EQ(e->type, "invalid_request_error") << body;
    EXPECT_NE(e->message.find(word), std::string::npos) << body << " → " << e->message;
  }
  EXPECT_TRUE(comp(R"({"max_tokens": 2})").has_value());
  EXPECT_TRUE(comp(R"({"prompt": [1, 1000]})").has_value());
  EXPECT_TRUE(comp(R"({"prompt": ["a", "b"]})").has_value());
  EXPECT_TRUE(comp(R"({"prompt": "x", "logprobs": 21})").has_value());
}

TEST(Api, error_body_has_the_openai_shape) {
  const json j = error_body(bad_request("nope"));
  EXPECT_EQ(j["error"]["message"], "nope");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], 400);
  EXPECT_EQ(dump(json{{"t", std::string("\xff")}}), "{\"t\":\"\xEF\xBF\xBD\"}");  // never throws
}

TEST(Api, anthropic_routes_get_anthropics_error_shape_and_types) {
  EXPECT_EQ(dialect_for_path("/v1/messages"), Dialect::kAnthropic);
  EXPECT_EQ(dialect_for_path("/v1/messages/count_tokens"), Dialect::kAnthropic);
  EXPECT_EQ(dialect_for_path("/v1/messagesx"), Dialect::kOpenAI);
  EXPECT_EQ(dialect_for_path("/v1/chat/completions"), Dialect::kOpenAI);
  const json j = anthropic_error_body(bad_request("nope"));
  EXPECT_EQ(dump(j),
            R"({"type":"error","error":{"type":"invalid_request_error","message":"nope"}})");
  const std::pair<int, const char*> types[] = {
      {400, "invalid_request_error"}, {401, "authentication_error"},
      {403, "permission_error"},      {404, "not_found_error"},
      {405, "invalid_request_error"}, {413, "request_too_large"},
      {429, "rate_limit_error"},      {500, "api_error"},
      {503, "overloaded_error"}};
  for (const auto& [status, type] : types) {
    const json e = anthropic_error_body(ApiError{.status = status, .type = "x", .message = "m"});
    EXPECT_EQ(e["error"]["type"], type) << status;
  }
}

TEST(Api, ollama_routes_get_ollamas_error_shape) {
  EXPECT_EQ(dialect_for_path("/api/chat"), Dialect::kOllama);
  EXPECT_EQ(dialect_for_path("/api/tags"), Dialect::kOllama);
  EXPECT_EQ(dialect_for_path("/apix"), Dialect::kOpenAI);
  EXPECT_EQ(dialect_for_path("/v1/api/chat"), Dialect::kOpenAI);
  EXPECT_EQ(dump(ollama_error_body(ApiError{.status = 404, .message = "model 'x' not found"})),
            R"({"error":"model 'x' not found"})");
}

TEST(Api, good_request_fills_the_options) {
  CompletionRequest r;
  ASSERT_FALSE(chat(R"({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}],
      "max_completion_tokens": 7, "temperature": 0, "top_k": 5, "min_p": 0.1, "seed": 9,
      "stop": ["x", ""], "logit_bias": {"3": -100}, "logprobs": true, "top_logprobs": 2,
      "stream": true, "stream_options": {"include_usage": true}})",
                    &r));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer → system
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.seq.n_predict, 7);
  EXPECT_EQ(r.seq.sampler.temp, 0.0f);
  EXPECT_EQ(r.seq.sampler.top_k, 5);
  EXPECT_EQ(r.seq.sampler.seed, 9u);
  EXPECT_EQ(r.seq.stop, std::vector<std::string>{"x"});  // empty stop strings dropped
  ASSERT_EQ(r.seq.sampler.logit_bias.size(), 1u);
  EXPECT_EQ(r.seq.sampler.logit_bias[0].id, 3);
  EXPECT_EQ(r.seq.top_logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
}

TEST(Api, speculative_fields_are_read_with_llama_servers_flat_names) {
  CompletionRequest r;
  ASSERT_FALSE(comp(R"({"prompt": "x"})", &r));
  EXPECT_FALSE(r.spec_n_max || r.spec_n_min || r.spec_p_min);  // absent: the server's flags
  ASSERT_FALSE(comp(
      R"({"prompt": "x", "speculative.n_max": 6, "speculative.n_min": 2, "speculative.p_min": 0.5})",
      &r));
  EXPECT_EQ(r.spec_n_max, 6);
  EXPECT_EQ(r.spec_n_min, 2);
  EXPECT_EQ(r.spec_p_min, 0.5f);
  // n_max 0 turns speculation off; n_min above it then asks for nothing.
  ASSERT_FALSE(comp(R"({"prompt": "x", "speculative.n_max": 0, "speculative.n_min": 5})", &r));
  EXPECT_EQ(r.spec_n_max, 0);
}

TEST(Api, defaults_are_llama_servers) {
  CompletionRequest r;
  ASSERT_FALSE(comp(R"({"prompt": "x"})", &r));
  EXPECT_EQ(*r.prompt, "x");
  EXPECT_EQ(r.seq.n_predict, -1);
  EXPECT_FLOAT_EQ(r.seq.sampler.temp, 0.8f);
  EXPECT_EQ(r.seq.sampler.top_k, 40);
  EXPECT_FLOAT_EQ(r.seq.sampler.top_p, 0.95f);
  EXPECT_FLOAT_EQ(r.seq.sampler.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.seq.sampler.repeat_penalty, 1.0f);
  EXPECT_EQ(r.seq.top_logprobs, -1);
  EXPECT_TRUE(r.grammar.empty());
  ASSERT_FALSE(comp(R"({"prompt": [[4, 5]]})", &r));
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{4, 5}));
}

TEST(Api, response_formats_become_grammars) {
  CompletionRequest r;
  ASSERT_FALSE(chat("{" + kMsg + R"(, "response_format": {"type": "json_object"}})", &r));
  EXPECT_NE(r.grammar.find("root"), std::string::npos);
  ASSERT_FALSE(chat("{" + kMsg + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "schema": {"type": "integer"}}}})",
                    &r));
  EXPECT_NE(r.grammar.find("root"), std::string::npos);
  ASSERT_FALSE(chat("{" + kMsg + R"(, "response_format": {"type": "text"}})", &r));
  EXPECT_TRUE(r.grammar.empty());
  auto e = chat("{" + kMsg + R"(, "json_schema": {"type": "object", "patternProperties": {}}})");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("schema"), std::string::npos);
}

}  // namespace
}  // namespace minfer::server
