// Stage 15 (the loop): the single-shot generation loop (sample → gates → forward).
#include "engine/generate.h"

#include <fmt/format.h>

#include <algorithm>

namespace minfer::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

int32_t keep_count(int32_t keep, std::span<const TokenId> prompt, const tokenizer::Tokenizer& tok) {
  const auto n = static_cast<int32_t>(prompt.size());
  if (keep < 0 || keep >= n) return n;
  const TokenId bos = tok.special().bos;
  const int32_t lead = bos != tokenizer::kNoToken && n > 0 && prompt[0] == bos ? 1 : 0;
  return std::min(keep + lead, n);
}

Result<int32_t> shift_context(Context& engine, Batch& batch, std::vector<TokenId>& tokens,
                              int32_t n_keep, int32_t n_batch) {
  const auto n_past = static_cast<int32_t>(tokens.size());
  const int32_t n_discard = shift_discard(n_past, n_keep);
  if (n_discard == 0) return 0;
  kv::KvCells* kv = engine.kv_cells();
  if (kv == nullptr) return make_error("context shift: no context (set_n_ctx)");
  // Every cell from n_keep on goes: the kept tail is computed again below, against the
  // kept tokens only — rows computed while the discarded tokens were visible stay out.
  kv->seq_rm(0, n_keep, -1);
  tokens.erase(tokens.begin() + n_keep, tokens.begin() + n_keep + n_discard);
  const std::span<const TokenId> tail(tokens.data() + n_keep, tokens.size() - n_keep);
  const size_t chunk = n_batch > 0 ? static_cast<size_t>(n_batch) : tail.size();
  for (size_t at = 0; at < tail.size(); at += chunk) {
    const size_t n = std::min(chunk, tail.size() - at);
    batch.clear();
    batch.add_run(tail.subspan(at, n), 0, n_keep + static_cast<int32_t>(at));
    if (auto out = engine.decode(batch); !out) {
      tokens.resize(static_cast<size_t>(n_keep) + at);
      return out.error().context("context shift");
    }
  }
  return n_discard;
}

Result<std::unique_ptr<Generator>> Generator::create(Context& engine,
                                                     const GenerateOptions& options,
                                                     TextSink sink) {
  if (!engine.has_tokenizer()) return make_error("generate: the model has no tokenizer");
  auto g = std::unique_ptr<Generator>(new Generator(engine, options, std::move(sink)));
  const auto n_ctx = static_cast<int32_t>(engine.n_ctx_seq());
  g->n_keep_ = std::clamp(options.n_keep, 0, n_ctx);
  const bool shift = options.context_shift && shift_discard(n_ctx, g->n_keep_) > 0;
  g->tokens_.reserve(engine.n_ctx_seq());
  MINFER_TRY(g->state_,
             SequenceState::create(engine.tokenizer(), g->token_bytes_,
                                   {.n_predict = options.n_predict,
                                    .stop = options.stop,
                                    .sampler = options.sampler,
                                    .n_ctx = engine.n_ctx_seq(),
                                    .ignore_eos = options.ignore_eos,
                                    .context_shift = shift,
                                    .reasoning = options.reasoning},
                                   options.make_constraint ? options.make_constraint() : nullptr));
  return g;
}

Generator::Generator(Context& engine, const GenerateOptions& options, TextSink sink)
    : engine_(engine),
      options_(options),
      token_bytes_(engine.token_bytes()),
      sink_(std::move(sink)) {}

Status Generator::prefill(std::span<const TokenId> prompt) {
  if (prompt.empty()) return make_error("generate: empty prompt (no tokens to condition on)");
  if (prompt.size() > engine_.n_ctx_seq()) {
    return make_error(fmt::format("generate: the prompt has {} tokens, the context {}",
                                  prompt.size(), engine_.n_ctx_seq()));
  }
  const EngineStats before = engine_.stats();
  const auto t0 = Clock::now();
  const size_t chunk = options_.n_batch > 0 ? static_cast<size_t>(options_.n_batch) : prompt.size();
  for (size_t at = 0; at < prompt.size(); at += chunk) {
    const size_t n = std::min(chunk, prompt.size() - at);
    MINFER_TRY_STATUS(decode_run(prompt.subspan(at, n), static_cast<int32_t>(at)));
  }
  stats_.prefill_s = seconds(Clock::now() - t0);
  after_prefill_ = engine_.stats();
  stats_.prefill_builds = after_prefill_.rebuilds - before.rebuilds;
  stats_.n_prompt = static_cast<int32_t>(prompt.size());
  tokens_.assign(prompt.begin(), prompt.end());
  n_keep_ = std::min(n_keep_, stats_.n_prompt);
  // The penalty window starts with the prompt tail (llama.cpp feeds prompt tokens to
  // the sampler), so the first generated tokens are penalized too; the cursor is n.
  state_->reset(prompt);
  return Ok{};
}

Status Generator::decode_run(std::span<const TokenId> tokens, int32_t pos0) {
  batch_.clear();
  batch_.add_run(tokens, 0, pos0);
  MINFER_TRY(const BatchLogits out, engine_.decode(batch_));
  logits_ = out.row(tokens.size() - 1);
  return Ok{};
}

Result<bool> Generator::step() {
  if (done_) return false;
  if (!decode_started_) {
    decode_t0_ = Clock::now();  // pure-decode clock (llama.cpp "eval time" caliber)
    decode_started_ = true;
  }
  // -n 0 allows no token: the state stops before sampling, so nothing is dumped.
  if (options_.n_predict != 0 && options_.on_logits) options_.on_logits(logits_);
  // Sample from the logits that exist (prefill's, or the previous step's forward), then
  // the gates; what is safe to print comes back as text.
  const auto ts = options_.timing ? Clock::now() : Clock::time_point{};
  MINFER_TRY(const SeqEvent ev, state_->next(logits_));
  if (options_.timing) stats_.sample_s += seconds(Clock::now() - ts);
  if (ev.token >= 0) stats_.n_samples++;
  stats_.n_generated = state_->n_generated();
  if (!ev.reasoning.empty() && options_.reasoning_sink) options_.reasoning_sink(ev.reasoning);
  if (!ev.text.empty()) sink_(ev.text);
  if (!ev.feed) {
    stats_.stop = ev.stop;
    done_ = true;
    return false;
  }
  // Forward last: logits for the next iteration.
  const auto tf = options_.timing ? Clock::now() : Clock::time_point{};
  const TokenId id = ev.token;
  int32_t pos = ev.pos;
  if (static_cast<uint32_t>(pos) >= engine_.n_ctx_seq()) {
    // No position left (only with a context shift: the state's gate ends the run
    // otherwise): make room, then feed the token after the kept tail.
    MINFER_TRY(const int32_t n, shift_context(engine_, batch_, tokens_, n_keep_, options_.n_batch));
    MINFER_CHECK(n > 0, "context shift at position %d discarded nothing (n_keep %d)", pos, n_keep_);
    state_->discard(n);
    pos -= n;
    stats_.n_shifts++;
    stats_.n_discarded += n;
  }
  MINFER_CHECK(static_cast<size_t>(pos) == tokens_.size(), "feed at %d, %zu tokens in the KV", pos,
               tokens_.size());
  MINFER_TRY_STATUS(decode_run(std::span<const TokenId>(&id, 1), pos));
  tokens_.push_back(id);
  if (options_.timing) stats_.forward_s += seconds(Clock::now() - tf);
  stats_.n_forwards++;
  return true;
}

void Generator::finish() {
  if (!done_) {  // cut short (an error): what was held back is text after all
    const std::string_view rest = state_->flush();
    const std::string_view thought = state_->flushed_reasoning();
    if (!thought.empty() && options_.reasoning_sink) options_.reasoning_sink(thought);
    if (!rest.empty()) sink_(rest);
  }
  if (decode_started_) stats_.decode_s = seconds(Clock::now() - decode_t0_);
  const EngineStats now = engine_.stats();
  stats_.decode_rebuilds = now.rebuilds - after_prefill_.rebuilds;
  stats_.decode_reuses = now.reuses - after_prefill_.reuses;
}

Result<GenerateStats> generate(Context& engine, std::span<const TokenId> prompt,
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
