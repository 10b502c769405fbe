// The converter's naming helpers against gguf-py (llama-cpp-python 0.3.36): the
// expected strings were printed by utility.size_label and Metadata.id_to_title on the
// same inputs.
#include "convert/metadata.h"

#include <gtest/gtest.h>

namespace minfer::convert {
namespace {

TEST(ConvertMetadata, SizeLabelMatchesGgufPy) {
  const std::pair<uint64_t, const char*> cases[] = {
      {16416768, "16M"},       {9809216, "10M"},    {19532352, "20M"},  // 19.5 → 20, ties even
      {134515008, "135M"},     {494032768, "494M"}, {1543714304, "1.5B"}, {999, "1.0K"},
      {500, "0.50K"},          {1000001, "1.0M"},   {7241732096, "7.2B"}, {70553706496, "71B"},
      {1500000000000, "1.5T"}, {2500000, "2.5M"},
  };
  for (const auto& [n, want] : cases) EXPECT_EQ(size_label(n), want) << n;
}

TEST(ConvertMetadata, IdToTitleMatchesGgufPy) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen2", "Qwen2"},
      {"llama", "Llama"},
      {"Meta-Llama-3-8B", "Meta Llama 3 8B"},
      {"tiny-llama-v2", "Tiny Llama v2"},
      {"SmolLM2-135M-Instruct", "SmolLM2 135M Instruct"},
      {"my_model-q4_0", "My_Model Q4_0"},
      {"3b-model", "3b Model"},
      {"hello world", "Hello World"},
  };
  for (const auto& [id, want] : cases) EXPECT_EQ(id_to_title(id), want) << id;
}

}  // namespace
}  // namespace minfer::convert
