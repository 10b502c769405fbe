// Tests (engine): the shared set-up of the embedding tests — the real all-MiniLM-L6-v2
// (converted by tools/make_test_models.sh from the folder scripts/setup.sh fetches) and the
// reference inputs of tests/data/embed (tools/reference/embed_reference.py).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "engine/embed.h"

namespace minfer::engine::testing {

inline std::string model_path() {
  return std::string(MINFER_CACHE_DIR) + "/models/all-MiniLM-L6-v2-f32.gguf";
}

struct Case {
  std::string text;
  std::vector<TokenId> ids;
  std::vector<float> embedding;
};

inline std::vector<Case> reference() {
  std::ifstream f(std::string(MINFER_TESTDATA_DIR) + "/embed/minilm-reference.json");
  EXPECT_TRUE(f.good());
  std::vector<Case> out;
  if (!f) return out;
  const nlohmann::json j = nlohmann::json::parse(f);
  for (const auto& c : j.at("cases")) {
    out.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<TokenId>>(),
                   c.at("embedding").get<std::vector<float>>()});
  }
  return out;
}

inline double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

class MiniLm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path())) {
      GTEST_SKIP() << model_path() << " not present (scripts/setup.sh)";
    }
    auto e = Engine::open(model_path(), {.n_threads = 2});
    ASSERT_TRUE(e.ok()) << e.error().message;
    engine_ = std::move(*e);
    Status st = engine_->set_context({.n_cells = 512, .n_seq_max = 8, .n_ctx_seq = 512});
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  std::unique_ptr<Engine> engine_;
};

}  // namespace minfer::engine::testing
