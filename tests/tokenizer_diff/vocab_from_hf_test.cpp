// Tests (tokenizer): vocabularies built by tools/hf_vocab from tokenizer.json must
// tokenize llama.cpp's own vectors exactly and carry the metadata llama.cpp's
// converter wrote into the reference vocab GGUFs.
// Generated GGUFs go to the build dir (tests/tokenizer_diff/hf-<name>.gguf).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gguf/gguf.h"
#include "hf_vocab/hf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kTestdata = MINFER_TESTDATA_DIR;
const fs::path kOutDir = fs::path(MINFER_BINARY_DIR) / "tests" / "tokenizer_diff";

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return json::parse(in);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Builds (once per process) tokenizers/<name> → <build>/tests/tokenizer_diff/hf-<name>.gguf.
const std::string& vocab_gguf(const std::string& name, const hf_vocab::Options& opts = {}) {
  static std::map<std::string, std::string> built;
  auto it = built.find(name);
  if (it != built.end()) return it->second;
  const fs::path dir = kTestdata / "tokenizers" / name;
  const json tok = read_json(dir / "tokenizer.json");
  std::optional<json> config;
  if (fs::exists(dir / "tokenizer_config.json")) config = read_json(dir / "tokenizer_config.json");
  auto vocab = hf_vocab::build_vocab(tok, config ? &*config : nullptr, opts);
  EXPECT_TRUE(vocab.ok()) << (vocab.ok() ? "" : vocab.error().message);
  fs::create_directories(kOutDir);
  const fs::path out = kOutDir / ("hf-" + name + ".gguf");
  // CTest runs each case in its own process, possibly in parallel: write a private file
  // and rename it into place (atomic), so no reader ever maps a half-written file.
  const fs::path tmp = out.string() + ".tmp." + std::to_string(::getpid());
  auto st = hf_vocab::to_writer(*vocab, opts).write(tmp.string());
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  fs::rename(tmp, out);
  return built.emplace(name, out.string()).first->second;
}

gguf::Model open_model(const std::string& path) {
  auto m = gguf::Model::open(path);
  EXPECT_TRUE(m.ok()) << path << ": " << (m.ok() ? "" : m.error().message);
  return std::move(m).value();
}

// llama.cpp's vocab vectors: inputs separated by "\n__ggml_vocab_test__\n" (the piece
// after the last separator is not a test), one line of ids per input.
void expect_vectors_exact(const std::string& gguf_path, const std::string& vectors) {
  const gguf::Model model = open_model(gguf_path);
  auto tok = tokenizer::Tokenizer::from_gguf(model);
  ASSERT_TRUE(tok.ok()) << tok.error().message;

  const std::string inp = read_file(kTestdata / "vocab" / (vectors + ".inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_file(kTestdata / "vocab" / (vectors + ".out")));
  std::vector<std::vector<tokenizer::TokenId>> expected;
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    std::vector<tokenizer::TokenId> ids;
    for (tokenizer::TokenId id; ls >> id;) ids.push_back(id);
    expected.push_back(std::move(ids));
  }
  ASSERT_EQ(texts.size(), expected.size()) << vectors;
  ASSERT_GT(texts.size(), 10u);

  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = (*tok)->encode(texts[i], {.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    if (*ids != expected[i] && ++mismatches <= 5) {
      ADD_FAILURE() << vectors << " test " << i << " text " << json(texts[i]).dump()
                    << "\n  expected " << testing::PrintToString(expected[i]) << "\n  got      "
                    << testing::PrintToString(*ids);
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << texts.size();
}

TEST(VocabFromHf, Qwen3VocabPassesQwen2Vectors_exact) {
  expect_vectors_exact(vocab_gguf("qwen3"), "ggml-vocab-qwen2.gguf");
}

TEST(VocabFromHf, Llama3VocabPassesLlamaBpeVectors_exact) {
  expect_vectors_exact(vocab_gguf("llama3"), "ggml-vocab-llama-bpe.gguf");
}

struct VocabMeta {
  std::string model, pre;
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
};

VocabMeta read_meta(const gguf::Model& m) {
  VocabMeta v;
  v.model = m.get_string("tokenizer.ggml.model").value();
  v.pre = m.get_string("tokenizer.ggml.pre").value();
  v.tokens = m.get_string_array("tokenizer.ggml.tokens").value();
  v.types = m.get_i32_array("tokenizer.ggml.token_type").value();
  if (m.has("tokenizer.ggml.merges"))
    v.merges = m.get_string_array("tokenizer.ggml.merges").value();
  return v;
}

// Index of the first difference of two ranges of [begin, end), or -1.
template <typename T>
int64_t first_diff(const std::vector<T>& a, const std::vector<T>& b, size_t end) {
  for (size_t i = 0; i < end; ++i) {
    if (a.at(i) != b.at(i)) return static_cast<int64_t>(i);
  }
  return -1;
}

TEST(VocabFromHf, Llama3MetadataEqualsLlamaBpeReference_exact) {
  const VocabMeta ours = read_meta(open_model(vocab_gguf("llama3")));
  const gguf::Model ref_model =
      open_model((kTestdata / "vocab" / "ggml-vocab-llama-bpe.gguf").string());
  const VocabMeta ref = read_meta(ref_model);
  EXPECT_EQ(ours.model, "gpt2");
  EXPECT_EQ(ours.pre, ref.pre);
  ASSERT_EQ(ours.tokens.size(), ref.tokens.size());
  EXPECT_EQ(first_diff(ours.tokens, ref.tokens, ref.tokens.size()), -1);
  EXPECT_EQ(first_diff(ours.types, ref.types, ref.types.size()), -1);
  ASSERT_EQ(ours.merges.size(), ref.merges.size());
  EXPECT_EQ(first_diff(ours.merges, ref.merges, ref.merges.size()), -1);
  const gguf::Model m = open_model(vocab_gguf("llama3"));
  EXPECT_EQ(m.get_u64("tokenizer.ggml.bos_token_id").value(),
            ref_model.get_u64("tokenizer.ggml.bos_token_id").value());
  EXPECT_EQ(m.get_u64("tokenizer.ggml.eos_token_id").value(),
            ref_model.get_u64("tokenizer.ggml.eos_token_id").value());
  EXPECT_FALSE(m.get_string("tokenizer.chat_template").value().empty());
}

// The Qwen3 vocabulary is Qwen2's plus added tokens at 151646..151668: ids below that
// and the merges are equal; Qwen2's reference (converted with its config.json
// vocab_size 151936) fills the rest with "[PAD{id}]".
TEST(VocabFromHf, Qwen3MetadataExtendsQwen2Reference_exact) {
  const gguf::Model m = open_model(vocab_gguf("qwen3"));
  const VocabMeta ours = read_meta(m);
  const VocabMeta ref =
      read_meta(open_model((kTestdata / "vocab" / "ggml-vocab-qwen2.gguf").string()));
  EXPECT_EQ(ours.model, "gpt2");
  EXPECT_EQ(ours.pre, "qwen2");
  EXPECT_EQ(ref.pre, "qwen2");
  constexpr size_t kShared = 151646;  // 151643 normal + 3 control tokens
  ASSERT_EQ(ours.tokens.size(), 151669u);
  EXPECT_EQ(first_diff(ours.tokens, ref.tokens, kShared), -1);
  EXPECT_EQ(first_diff(ours.types, ref.types, kShared), -1);
  for (size_t i = kShared; i < ref.tokens.size(); ++i) {
    ASSERT_EQ(ref.tokens[i], "[PAD" + std::to_string(i) + "]");
  }
  ASSERT_EQ(ours.merges.size(), ref.merges.size());
  EXPECT_EQ(first_diff(ours.merges, ref.merges, ref.merges.size()), -1);
  // Added tokens: special or "<|...|>"-looking → CONTROL, the others USER_DEFINED.
  EXPECT_EQ(ours.tokens[151644], "<|im_start|>");
  EXPECT_EQ(ours.types[151644], 3);
  EXPECT_EQ(ours.tokens[151659], "<|fim_prefix|>");  // special=false but looks special
  EXPECT_EQ(ours.types[151659], 3);
  EXPECT_EQ(ours.tokens[151667], "<think>");
  EXPECT_EQ(ours.types[151667], 4);
  EXPECT_EQ(m.get_u64("tokenizer.ggml.eos_token_id").value(), 151645u);      // <|im_end|>
  EXPECT_EQ(m.get_u64("tokenizer.ggml.padding_token_id").value(), 151643u);  // <|endoftext|>
  EXPECT_FALSE(m.has("tokenizer.ggml.bos_token_id"));                        // bos_token: null
  EXPECT_EQ(m.get_bool("tokenizer.ggml.add_bos_token").value(), false);
  EXPECT_FALSE(m.get_string("tokenizer.chat_template").value().empty());
}

TEST(VocabFromHf, Qwen3PaddedToEmbeddingRowsFillsHolesWithUnusedPads_exact) {
  const fs::path dir = kTestdata / "tokenizers" / "qwen3";
  const json tok = read_json(dir / "tokenizer.json");
  auto vocab = hf_vocab::build_vocab(tok, nullptr, {.vocab_size = 151936});
  ASSERT_TRUE(vocab.ok()) << vocab.error().message;
  ASSERT_EQ(vocab->tokens.size(), 151936u);
  EXPECT_EQ(vocab->tokens[151669], "[PAD151669]");
  EXPECT_EQ(vocab->types[151669], 5);  // UNUSED (the Qwen2 reference's older converter: 4)
  EXPECT_EQ(vocab->tokens[151935], "[PAD151935]");
  auto too_small = hf_vocab::build_vocab(tok, nullptr, {.vocab_size = 1000});
  EXPECT_FALSE(too_small.ok());
}

// Llama 2 style: SentencePiece BPE with byte fallback, written as tokenizer.ggml.model
// "llama" with scores; no reference GGUF for this exact vocabulary, so check structure.
TEST(VocabFromHf, Llama2SpmVocabStructure_exact) {
  const gguf::Model m = open_model(vocab_gguf("llama2"));
  const VocabMeta v = read_meta(m);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.pre, "default");
  ASSERT_EQ(v.tokens.size(), 32000u);
  EXPECT_TRUE(v.merges.empty());
  std::map<int32_t, int> counts;
  for (int32_t t : v.types) ++counts[t];
  EXPECT_EQ(counts[6], 256);  // <0x00>..<0xFF>
  EXPECT_EQ(counts[2], 1);    // <unk>
  EXPECT_EQ(counts[3], 2);    // <s> </s>
  EXPECT_EQ(v.types[0], 2);
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.types[3], 6);
  const std::vector<float> scores = m.get_f32_array("tokenizer.ggml.scores").value();
  ASSERT_EQ(scores.size(), 32000u);
  // Merged pieces score by merge rank: the first merge ("▁ t") makes the best score.
  const auto t_id = std::find(v.tokens.begin(), v.tokens.end(), "\xe2\x96\x81t") - v.tokens.begin();
  EXPECT_EQ(scores[static_cast<size_t>(t_id)], 0.0f);
  EXPECT_LT(scores[v.tokens.size() - 1], scores[static_cast<size_t>(t_id)]);
  EXPECT_EQ(m.get_u64("tokenizer.ggml.bos_token_id").value(), 1u);
  EXPECT_EQ(m.get_u64("tokenizer.ggml.unknown_token_id").value(), 0u);
  EXPECT_EQ(m.get_bool("tokenizer.ggml.add_bos_token").value(), true);
  EXPECT_EQ(m.get_bool("tokenizer.ggml.add_space_prefix").value(), true);
}

TEST(VocabFromHf, MergesListFormEncodesSpacesAsU0120_exact) {
  json tok = {
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", false},
        {"vocab", {{"a", 0}, {"b", 1}, {"a b", 2}, {"ab", 3}}},
        {"merges", json::array({json::array({"a", "b"}), json::array({"a ", "b"})})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"added_tokens",
       json::array({{{"id", 5}, {"content", "<|x|>"}, {"special", false}},
                    {{"id", 6}, {"content", "\xe2\x96\x81y"}, {"special", false}}})},
  };
  auto v = hf_vocab::build_vocab(tok, nullptr, {});
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->pre, "gpt-2");
  ASSERT_EQ(v->merges.size(), 2u);
  EXPECT_EQ(v->merges[0], "a b");
  EXPECT_EQ(v->merges[1], "a\xc4\xa0 b");
  ASSERT_EQ(v->tokens.size(), 7u);
  EXPECT_EQ(v->tokens[4], "[PAD4]");
  EXPECT_EQ(v->types[4], 5);
  EXPECT_EQ(v->types[5], 3);      // looks special
  EXPECT_EQ(v->tokens[6], " y");  // user-defined "▁" pre-normalized to a space
  EXPECT_EQ(v->types[6], 4);

  tok["pre_tokenizer"] = {{"type", "Whitespace"}};
  auto unknown = hf_vocab::build_vocab(tok, nullptr, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("--pre"), std::string::npos);
  auto forced = hf_vocab::build_vocab(tok, nullptr, {.pre = "gpt-2"});
  EXPECT_TRUE(forced.ok());
}

TEST(VocabFromHf, SpecialTokensFromConfigStringsAndAddedTokenObjects_exact) {
  json tok = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
      {"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
  };
  const json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                       {"eos_token", "</s>"},
                       {"pad_token", nullptr},
                       {"add_bos_token", true},
                       {"add_eos_token", false},
                       {"chat_template", json::array({{{"name", "default"}, {"template", "D"}},
                                                      {{"name", "tool_use"}, {"template", "T"}}})}};
  auto v = hf_vocab::build_vocab(tok, &config, {});
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->special.bos, 1);
  EXPECT_EQ(v->special.eos, 2);
  EXPECT_FALSE(v->special.pad.has_value());
  EXPECT_EQ(v->special.add_bos, true);
  EXPECT_EQ(v->special.add_eos, false);
  EXPECT_EQ(v->chat_template, "D");
  ASSERT_EQ(v->named_templates.size(), 1u);
  EXPECT_EQ(v->named_templates[0].first, "tool_use");
}

}  // namespace
}  // namespace minfer
