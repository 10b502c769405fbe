// Stage 16 tests (sessions): template variables from --chat-template-kwargs reach the
// template (Qwen3's enable_thinking, against Python jinja2's renders), and a GGUF
// without a template but with Gemma's turn tokens gets the built-in Gemma 3 template.
#include "chat/renderer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "chat/builtin_templates.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace minfer::chat {
namespace {

nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every enable_thinking=False case of the Qwen3 template, rendered with the kwargs
// object, equals jinja2's output byte for byte (the kwargs are the template variables).
TEST(Renderer, ChatTemplateKwargsReachTheTemplate_equalsJinja2) {
  const std::string dir = std::string(MINFER_TESTDATA_DIR);
  const auto cases = read_json(dir + "/chat_template/Qwen-Qwen3-0.6B.json");
  const std::string source = read_text(dir + "/templates/Qwen-Qwen3-0.6B.jinja");
  int checked = 0;
  for (const auto& c : cases["cases"]) {
    const auto& ctx = c["context"];
    if (!ctx.contains("enable_thinking") || !c.contains("expected")) continue;
    TemplateSpec spec{.source = source,
                      .bos_token = ctx.value("bos_token", ""),
                      .eos_token = ctx.value("eos_token", ""),
                      .kwargs = {{"enable_thinking", ctx["enable_thinking"]}}};
    auto r = make_template_renderer(std::move(spec));
    auto out = r->render_json(ctx["messages"], nullptr, ctx["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(out.ok()) << c["name"] << ": " << out.error().message;
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << c["name"];
    ++checked;
  }
  EXPECT_EQ(checked, 4);  // the no_thinking cases of make_cases.py
  // Without the variable the same conversation renders the thinking form (differs).
  TemplateSpec plain{.source = source};
  nlohmann::ordered_json msgs = {{{"role", "user"}, {"content", "Hi"}}};
  auto a = make_template_renderer(plain)->render_json(msgs, nullptr, true);
  plain.kwargs = {{"enable_thinking", false}};
  auto b = make_template_renderer(plain)->render_json(msgs, nullptr, true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*b, *a + "<think>\n\n</think>\n\n");
}

// Gemma 3 270M (scripts/setup.sh) has no tokenizer.chat_template: its turn tokens pick
// the built-in Gemma 3 template, which renders as the checked-in file does.
TEST(Renderer, GemmaVocabularyWithoutTemplateGetsTheGemma3Template) {
  const std::string path = std::string(MINFER_CACHE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is missing: run scripts/setup.sh";
  EXPECT_EQ(std::string(kGemma3Template),
            read_text(std::string(MINFER_TESTDATA_DIR) + "/templates/google-gemma-3-it.jinja"));
  auto file = gguf::Model::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto tok = tokenizer::Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  ASSERT_TRUE((*tok)->chat_template().empty());
  RendererChoice choice = renderer_for(**tok);
  EXPECT_TRUE(choice.fallback);
  EXPECT_EQ(choice.fallback_name, "the built-in Gemma 3 template");
  std::vector<Message> msgs = {{.role = "user", .content = "Hi"},
                               {.role = "assistant", .content = "Hello!"},
                               {.role = "user", .content = "Bye"}};
  auto out = choice.renderer->render(msgs, true);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out,
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

// The thinking block on a rendered prompt: a forced-open prompt, a template that writes
// the close tag, a closed block (nothing to track), budget 0 closing it in the prompt, and
// a constraint opening it where the model would.
TEST(PlanThinking, ForcedOpenPromptStartsInsideTheBlock) {
  std::string p = "<|User|>hi<|Assistant|><think>\n";
  const ThinkingPlan plan = plan_thinking("no tags here", p, -1, false);
  EXPECT_TRUE(plan.track);
  EXPECT_TRUE(plan.forced_open);
  EXPECT_EQ(p, "<|User|>hi<|Assistant|><think>\n");
}

TEST(PlanThinking, TemplateWithCloseTagTracksAndAConstraintOpensTheBlock) {
  const std::string_view src = "{{ '<think>' }}...{{ '</think>' }}";
  std::string p = "<|im_start|>assistant\n";
  ThinkingPlan plan = plan_thinking(src, p, 16, false);
  EXPECT_TRUE(plan.track);
  EXPECT_FALSE(plan.forced_open);
  EXPECT_EQ(p, "<|im_start|>assistant\n");
  plan = plan_thinking(src, p, 16, /*constrained=*/true);
  EXPECT_TRUE(plan.track);
  EXPECT_TRUE(plan.forced_open);
  EXPECT_EQ(p, "<|im_start|>assistant\n<think>\n");
}

TEST(PlanThinking, BudgetZeroClosesTheBlockInThePrompt) {
  const std::string_view src = "... </think> ...";
  std::string qwen = "<|im_start|>assistant\n";
  EXPECT_FALSE(plan_thinking(src, qwen, 0, true).track);
  EXPECT_EQ(qwen, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  std::string r1 = "<|Assistant|><think>\n";
  EXPECT_FALSE(plan_thinking("", r1, 0, false).track);
  EXPECT_EQ(r1, "<|Assistant|><think>\n\n</think>\n\n");
}

TEST(PlanThinking, ClosedBlockOrNoBlockIsNotTracked) {
  std::string closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_FALSE(plan_thinking("</think>", closed, -1, true).track);
  EXPECT_EQ(closed, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  std::string plain = "<|im_start|>assistant\n";
  EXPECT_FALSE(plan_thinking("{{ messages }}", plain, 0, true).track);
  EXPECT_EQ(plain, "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace minfer::chat
