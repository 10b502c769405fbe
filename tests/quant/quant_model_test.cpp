// Stage 3 tests: dequantizing every tensor of the real SmolLM2-135M-Instruct Q4_1 file
// gives llama.cpp's floats bit for bit (FNV-1a checksums written by ggml).
// Invariant: tensors are read at the byte offsets ggml's own GGUF parser reported
// (tests/data/quant/smollm2_dequant.txt), so this test does not depend on src/gguf.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "quant/quant.h"
#include "tests/quant/goldens.h"

namespace minfer::quant {
namespace {

constexpr const char* kModelName = "SmolLM2-135M-Instruct.Q4_1.gguf";

struct TensorSum {
  std::string name;
  uint32_t type = 0;
  uint64_t n = 0, offset = 0, n_bytes = 0, fnv = 0;
};

TEST(SmolLM2Dequant, EveryTensorMatchesGgml_bitwise) {
  const std::string model_path = std::string(MINFER_CACHE_DIR) + "/models/" + kModelName;
  {
    std::ifstream probe(model_path);
    if (!probe) GTEST_SKIP() << "model not in the cache (run scripts/setup.sh): " << model_path;
  }
  std::ifstream in(test::golden_dir() + "/smollm2_dequant.txt");
  ASSERT_TRUE(in) << "missing smollm2_dequant.txt";
  std::string header;
  std::getline(in, header);
  const size_t paren = header.find('(');
  ASSERT_NE(paren, std::string::npos) << header;
  const uint64_t want_size = std::stoull(header.substr(paren + 1));

  std::vector<TensorSum> sums;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    TensorSum s;
    ls >> s.name >> s.type >> s.n >> s.offset >> s.n_bytes >> std::hex >> s.fnv;
    ASSERT_FALSE(ls.fail()) << line;
    sums.push_back(s);
  }
  ASSERT_GE(sums.size(), 200u);

  auto file = MappedFile::open(model_path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  const MappedFile& mf = **file;
  ASSERT_EQ(mf.size(), want_size) << "a different " << kModelName << " than the goldens'";

  size_t checked = 0;
  uint64_t elements = 0;
  std::vector<float> out;
  for (const auto& s : sums) {
    const auto type = static_cast<DType>(s.type);
    ASSERT_NE(traits(type), nullptr) << s.name << ": " << dtype_name(type);
    ASSERT_LE(s.offset, mf.size());
    ASSERT_LE(s.n_bytes, mf.size() - s.offset) << s.name;
    out.resize(s.n);
    auto st = dequantize(type, mf.bytes().subspan(s.offset, s.n_bytes), out);
    ASSERT_TRUE(st.ok()) << s.name << ": " << st.error().message;
    EXPECT_EQ(test::fnv1a_words(out.data(), out.size()), s.fnv)
        << s.name << " (" << dtype_name(type) << ", " << s.n << " elements)";
    ++checked;
    elements += s.n;
  }
  RecordProperty("tensors", std::to_string(checked));
  RecordProperty("elements", std::to_string(elements));
  EXPECT_EQ(checked, sums.size());
}

}  // namespace
}  // namespace minfer::quant
