// Stage 3 tests, end to end with the file stage: every tensor of the real SmolLM2 Q4_1
// file, located by our GGUF reader and dequantized by our kernels, equals llama.cpp's
// dequantization bit for bit (checksums in tests/data/quant/smollm2_dequant.txt).
// Invariant: our reader finds the same tensors, types, sizes and offsets as ggml's.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tests/quant/goldens.h"

namespace minfer::quant {
namespace {

struct Expected {
  uint32_t type = 0;
  uint64_t n = 0, offset = 0, n_bytes = 0, fnv = 0;
};

TEST(SmolLM2ViaGguf, EveryTensorMatchesGgml_bitwise) {
  const std::string model_path =
      std::string(MINFER_CACHE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  {
    std::ifstream probe(model_path);
    if (!probe) GTEST_SKIP() << "model not in the cache (run scripts/setup.sh): " << model_path;
  }
  std::ifstream in(test::golden_dir() + "/smollm2_dequant.txt");
  ASSERT_TRUE(in);
  std::string line;
  std::getline(in, line);  // header
  std::map<std::string, Expected> want;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    Expected e;
    ls >> name >> e.type >> e.n >> e.offset >> e.n_bytes >> std::hex >> e.fnv;
    ASSERT_FALSE(ls.fail()) << line;
    want[name] = e;
  }

  auto file = gguf::File::open(model_path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  const gguf::File& f = **file;
  ASSERT_EQ(f.tensors().size(), want.size());
  std::vector<float> out;
  for (const gguf::TensorInfo& t : f.tensors()) {
    auto it = want.find(t.name);
    ASSERT_NE(it, want.end()) << "ggml has no tensor " << t.name;
    const Expected& e = it->second;
    EXPECT_EQ(static_cast<uint32_t>(t.type), e.type) << t.name;
    EXPECT_EQ(t.n_elements, e.n) << t.name;
    EXPECT_EQ(t.n_bytes, e.n_bytes) << t.name;
    EXPECT_EQ(f.data_offset() + t.offset, e.offset) << t.name;
    ASSERT_NE(t.data, nullptr) << t.name;
    out.resize(t.n_elements);
    auto st = dequantize(t.type, {t.data, t.n_bytes}, out);
    ASSERT_TRUE(st.ok()) << t.name << ": " << st.error().message;
    EXPECT_EQ(test::fnv1a_words(out.data(), out.size()), e.fnv) << t.name;
  }
}

}  // namespace
}  // namespace minfer::quant
