// Stage 15 (the loop): the single-shot generation loop (sample → gates → forward).
#include "engine/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

namespace minfer::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::string_view stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kNone:
      return "none";
    case StopReason::kNPredict:
      return "n_predict";
    case StopReason::kEog:
      return "eog";
    case StopReason::kStopString:
      return "stop string";
    case StopReason::kContext:
      return "context full";
  }
  return "?";
}

Result<std::unique_ptr<Generator>> Generator::create(Engine& engine, const GenerateOptions& options,
                                                     TextSink sink) {
  if (!engine.has_tokenizer()) return make_error("generate: the model has no tokenizer");
  MINFER_TRY(sample::Sampler sampler,
             sample::Sampler::create(options.sampler, engine.tokenizer().n_vocab()));
  return std::unique_ptr<Generator>(
      new Generator(engine, options, std::move(sampler), std::move(sink)));
}

Generator::Generator(Engine& engine, const GenerateOptions& options, sample::Sampler sampler,
                     TextSink sink)
    : engine_(engine),
      options_(options),
      sampler_(std::move(sampler)),
      token_bytes_(engine.tokenizer()),
      stop_(options_.stop, token_bytes_.max_len()),
      out_(std::move(sink)) {
  if (options_.ignore_eos) {
    const tokenizer::Tokenizer& tok = engine.tokenizer();
    for (TokenId id = 0; id < tok.n_vocab(); ++id) {
      if (tok.is_eog(id)) eog_ids_.push_back(id);
    }
    masked_.resize(engine.hparams().n_vocab);
  }
  // Everything the loop appends to is sized here, so steps do not allocate.
  const uint32_t n_ctx = engine_.n_ctx();
  const size_t cap = options_.n_predict >= 0
                         ? std::min<size_t>(static_cast<size_t>(options_.n_predict), n_ctx)
                         : n_ctx;
  generated_.reserve(cap);
}

Status Generator::prefill(std::span<const TokenId> prompt) {
  if (prompt.empty()) return make_error("generate: empty prompt (no tokens to condition on)");
  if (prompt.size() > engine_.n_ctx()) {
    return make_error(fmt::format("generate: the prompt has {} tokens, the context {}",
                                  prompt.size(), engine_.n_ctx()));
  }
  std::vector<int32_t> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  const EngineStats before = engine_.stats();
  const auto t0 = Clock::now();
  const size_t chunk = options_.n_batch > 0 ? static_cast<size_t>(options_.n_batch) : prompt.size();
  for (size_t at = 0; at < prompt.size(); at += chunk) {
    const size_t n = std::min(chunk, prompt.size() - at);
    MINFER_TRY(logits_, engine_.forward(prompt.subspan(at, n),
                                        std::span<const int32_t>(positions).subspan(at, n), 1));
  }
  stats_.prefill_s = seconds(Clock::now() - t0);
  after_prefill_ = engine_.stats();
  stats_.prefill_builds = after_prefill_.rebuilds - before.rebuilds;
  stats_.n_prompt = static_cast<int32_t>(prompt.size());
  pos_ = static_cast<int32_t>(prompt.size());
  // The penalty window starts with the prompt tail (llama.cpp feeds prompt tokens to
  // the sampler), so the first generated tokens are penalized too.
  sampler_.reset(prompt);
  return Ok{};
}

Result<bool> Generator::step() {
  if (done_) return false;
  if (!decode_started_) {
    decode_t0_ = Clock::now();  // pure-decode clock (llama.cpp "eval time" caliber)
    decode_started_ = true;
  }
  // Gate: the -n cap, at the loop head.
  if (options_.n_predict >= 0 && stats_.n_generated >= options_.n_predict) {
    stats_.stop = StopReason::kNPredict;
    done_ = true;
    return false;
  }

  // Sample from the logits that exist (prefill's, or the previous step's forward).
  if (options_.on_logits) options_.on_logits(logits_);
  std::span<const float> logits = logits_;
  if (options_.ignore_eos) {
    std::copy(logits_.begin(), logits_.end(), masked_.begin());
    for (TokenId e : eog_ids_) {
      if (static_cast<size_t>(e) < masked_.size())
        masked_[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
    }
    logits = masked_;
  }
  const auto ts = options_.timing ? Clock::now() : Clock::time_point{};
  MINFER_TRY(const TokenId id, sampler_.sample(logits));
  if (options_.timing) stats_.sample_s += seconds(Clock::now() - ts);
  stats_.n_samples++;

  // Gate: end of generation. Single-shot drops the token: not printed, not accepted,
  // no forward (a chat session would instead decode it into the KV).
  if (engine_.tokenizer().is_eog(id)) {
    stats_.stop = StopReason::kEog;
    done_ = true;
    return false;
  }
  sampler_.accept(id);
  generated_.push_back(id);
  stats_.n_generated++;

  // Gate: stop strings, over the bytes of the whole generated stream. The matcher
  // returns what is safe to print: a possible start of a stop string is held back
  // until the next bytes decide, and a completed stop string is never printed.
  const StopMatcher::Feed f = stop_.feed(token_bytes_[id]);
  out_.feed(f.text);
  if (f.stopped) {
    stats_.stop = StopReason::kStopString;
    done_ = true;
    return false;
  }

  // A full KV cannot take the next position: stop before the forward would refuse it.
  if (static_cast<uint32_t>(pos_) >= engine_.n_ctx()) {
    stats_.stop = StopReason::kContext;
    done_ = true;
    return false;
  }

  // Forward last: logits for the next iteration.
  const auto tf = options_.timing ? Clock::now() : Clock::time_point{};
  const int32_t position = pos_;
  MINFER_TRY(logits_, engine_.forward(std::span<const TokenId>(&id, 1),
                                      std::span<const int32_t>(&position, 1), 1));
  if (options_.timing) stats_.forward_s += seconds(Clock::now() - tf);
  stats_.n_forwards++;
  pos_++;
  return true;
}

void Generator::finish() {
  out_.feed(stop_.flush());
  out_.flush();
  if (decode_started_) stats_.decode_s = seconds(Clock::now() - decode_t0_);
  const EngineStats now = engine_.stats();
  stats_.decode_rebuilds = now.rebuilds - after_prefill_.rebuilds;
  stats_.decode_reuses = now.reuses - after_prefill_.reuses;
}

Result<GenerateStats> generate(Engine& engine, std::span<const TokenId> prompt,
                               const GenerateOptions& options, TextSink sink) {
  MINFER_TRY(std::unique_ptr<Generator> gen, Generator::create(engine, options, std::move(sink)));
  MINFER_TRY_STATUS(gen->prefill(prompt));
  for (;;) {
    MINFER_TRY(bool more, gen->step());
    if (!more) break;
  }
  gen->finish();
  return gen->stats();
}

}  // namespace minfer::engine
