// Stage 14 tests: SamplerConfig defaults and validation.
// Invariant pinned: defaults are llama.cpp's (the CLI, chat and server share them); bad values are
// refused (never clamped) with an error naming the field and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sample/sampler.h"
#include "sample/sampler_config.h"

namespace minfer::sample {
namespace {

TEST(SamplerConfig, DefaultsAreLlamaCppsSharedByCliChatAndServer) {
  const SamplerConfig c;
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.temp, 0.8f);
  EXPECT_EQ(c.top_k, 40);
  EXPECT_EQ(c.top_p, 0.95f);
  EXPECT_EQ(c.min_p, 0.05f);
  EXPECT_EQ(c.typical_p, 1.0f);
  EXPECT_EQ(c.repeat_penalty, 1.0f);
  EXPECT_EQ(c.repeat_last_n, 64);
  EXPECT_EQ(c.frequency_penalty, 0.0f);
  EXPECT_EQ(c.presence_penalty, 0.0f);
  EXPECT_EQ(c.xtc_probability, 0.0f);
  EXPECT_EQ(c.xtc_threshold, 0.5f);
  EXPECT_EQ(c.dry_multiplier, 0.0f);
  EXPECT_EQ(c.dry_base, 1.75f);
  EXPECT_EQ(c.dry_allowed_length, 2);
  EXPECT_EQ(c.dry_penalty_last_n, 64);
  EXPECT_EQ(c.mirostat, Mirostat::kOff);
  EXPECT_EQ(c.mirostat_tau, 5.0f);
  EXPECT_EQ(c.mirostat_eta, 0.1f);
  EXPECT_EQ(c.mirostat_m, 100);
  EXPECT_TRUE(c.logit_bias.empty());
  EXPECT_TRUE(c.validate().ok());
  EXPECT_FALSE(c.greedy());
}

TEST(SamplerConfig, GreedyBelowOneMillionth) {
  EXPECT_TRUE((SamplerConfig{.temp = 0.0f}).greedy());
  EXPECT_TRUE((SamplerConfig{.temp = -1.0f}).greedy());
  EXPECT_TRUE((SamplerConfig{.temp = 5e-7f}).greedy());
  EXPECT_FALSE((SamplerConfig{.temp = 1e-5f}).greedy());
  EXPECT_TRUE((SamplerConfig{.temp = -1.0f}).validate().ok()) << "negative temp means greedy";
}

void expect_refused(const SamplerConfig& c, const std::string& field, const std::string& value) {
  const Status st = c.validate();
  ASSERT_FALSE(st.ok()) << field;
  EXPECT_NE(st.error().message.find(field), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find(value), std::string::npos) << st.error().message;
}

TEST(SamplerConfig, RefusesOutOfRangeValuesNamingFieldAndValue) {
  expect_refused({.top_p = 1.5f}, "top-p", "1.5");
  expect_refused({.top_p = -0.1f}, "top-p", "-0.1");
  expect_refused({.top_k = -1}, "top-k", "-1");
  expect_refused({.min_p = 2.0f}, "min-p", "2");
  expect_refused({.typical_p = -1.0f}, "typical", "-1");
  expect_refused({.temp = NAN}, "temp", "nan");
  expect_refused({.temp = INFINITY}, "temp", "inf");
  expect_refused({.repeat_penalty = 0.0f}, "repeat-penalty", "0");
  expect_refused({.repeat_last_n = -1}, "repeat-last-n", "-1");
  expect_refused({.frequency_penalty = NAN}, "frequency-penalty", "nan");
  expect_refused({.presence_penalty = INFINITY}, "presence-penalty", "inf");
  expect_refused({.xtc_probability = 1.5f}, "xtc-probability", "1.5");
  expect_refused({.xtc_threshold = 0.6f}, "xtc-threshold", "0.6");
  expect_refused({.dry_multiplier = -1.0f}, "dry-multiplier", "-1");
  expect_refused({.dry_base = 0.5f}, "dry-base", "0.5");
  expect_refused({.dry_allowed_length = -2}, "dry-allowed-length", "-2");
  expect_refused({.dry_multiplier = 0.8f, .dry_penalty_last_n = 0}, "dry-penalty-last-n", "0");
  expect_refused({.mirostat = static_cast<Mirostat>(3)}, "mirostat", "3");
  expect_refused({.mirostat_tau = 0.0f}, "mirostat-tau", "0");
  expect_refused({.mirostat_eta = 1.5f}, "mirostat-eta", "1.5");
  expect_refused({.mirostat_m = 1}, "mirostat-m", "1");
  expect_refused({.logit_bias = {{.id = 3, .bias = 150.0f}}}, "logit-bias 3:150", "[-100, 100]");
  expect_refused({.logit_bias = {{.id = -1, .bias = 1.0f}}}, "logit-bias id", "-1");
}

TEST(SamplerConfig, BoundaryValuesAreAccepted) {
  for (const SamplerConfig& c :
       {SamplerConfig{.top_p = 0.0f}, SamplerConfig{.top_p = 1.0f}, SamplerConfig{.min_p = 1.0f},
        SamplerConfig{.typical_p = 0.0f}, SamplerConfig{.xtc_threshold = 0.5f},
        SamplerConfig{.xtc_threshold = 0.0f}, SamplerConfig{.repeat_last_n = 0},
        SamplerConfig{.dry_base = 1.0f},
        SamplerConfig{.logit_bias = {{.id = 0, .bias = -100.0f}}}}) {
    EXPECT_TRUE(c.validate().ok()) << c.validate().error().message;
  }
}

TEST(SamplerConfig, VocabularyChecksIds) {
  const SamplerConfig bias{.logit_bias = {{.id = 10, .bias = 1.0f}}};
  EXPECT_TRUE(bias.validate().ok());
  const auto st = bias.validate_for_vocab(10);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("logit-bias id 10"), std::string::npos) << st.error().message;
  EXPECT_TRUE(bias.validate_for_vocab(11).ok());
  EXPECT_FALSE((SamplerConfig{.dry_sequence_breakers = {{1, 12}}}).validate_for_vocab(11).ok());
  EXPECT_FALSE((SamplerConfig{.dry_sequence_breakers = {{}}}).validate().ok());
  EXPECT_FALSE(Sampler::create(bias, 10).ok());
  EXPECT_FALSE(Sampler::create(SamplerConfig{}, 0).ok());
}

}  // namespace
}  // namespace minfer::sample
