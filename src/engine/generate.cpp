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
  const SpecOptions& spec = options.spec;
  if (spec.enabled()) {
    if (spec.ngram > 0 && spec.draft != nullptr) {
      return make_error("speculative decoding: give an n-gram size or a draft model, not both");
    }
    if (spec.ngram < 0 || spec.n_max < 1 || spec.n_min < 0 || !(spec.p_min >= 0.0f) ||
        spec.p_min > 1.0f) {
      return make_error(fmt::format(
          "speculative decoding: n-gram size {}, draft max {}, draft min {}, p-min {} (want an "
          "n-gram size >= 0, a max >= 1, a min >= 0, p-min in [0, 1])",
          spec.ngram, spec.n_max, spec.n_min, spec.p_min));
    }
    if (spec.draft != nullptr) {
      Context& d = *spec.draft;
      if (!d.has_tokenizer()) return make_error("the draft model has no tokenizer");
      MINFER_TRY_STATUS(check_draft_vocab(engine.tokenizer(), d.tokenizer()));
      if (d.kv_cells() == nullptr || d.n_ctx_seq() < engine.n_ctx_seq()) {
        return make_error(
            fmt::format("the draft model's context ({}) is smaller than the target's ({})",
                        d.n_ctx_seq(), engine.n_ctx_seq()));
      }
      g->draft_model_ = std::make_unique<DraftModel>(d, options.n_batch, spec.n_max);
    }
    g->draft_.reserve(static_cast<size_t>(spec.n_max));
    g->batch_ = Batch(static_cast<size_t>(spec.n_max) + 1);
  }
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

Result<SeqEvent> Generator::sample(std::span<const float> logits) {
  // -n 0 allows no token: the state stops before sampling, so nothing is dumped.
  if (options_.n_predict != 0 && options_.on_logits) options_.on_logits(logits);
  // Sample from the logits that exist (prefill's, or the previous step's forward), then
  // the gates; what is safe to print comes back as text.
  const auto ts = options_.timing ? Clock::now() : Clock::time_point{};
  MINFER_TRY(const SeqEvent ev, state_->next(logits));
  if (options_.timing) stats_.sample_s += seconds(Clock::now() - ts);
  if (ev.token >= 0) stats_.n_samples++;
  stats_.n_generated = state_->n_generated();
  if (!ev.reasoning.empty() && options_.reasoning_sink) options_.reasoning_sink(ev.reasoning);
  if (!ev.text.empty()) sink_(ev.text);
  if (!ev.feed) {
    stats_.stop = ev.stop;
    done_ = true;
  }
  return ev;
}

Result<int32_t> Generator::make_room(int32_t pos) {
  if (static_cast<uint32_t>(pos) < engine_.n_ctx_seq()) return pos;
  // No position left (only with a context shift: the state's gate ends the run
  // otherwise): make room, then feed the token after the kept tail.
  MINFER_TRY(const int32_t n, shift_context(engine_, batch_, tokens_, n_keep_, options_.n_batch));
  MINFER_CHECK(n > 0, "context shift at position %d discarded nothing (n_keep %d)", pos, n_keep_);
  state_->discard(n);
  stats_.n_shifts++;
  stats_.n_discarded += n;
  return pos - n;
}

Result<bool> Generator::step() {
  if (done_) return false;
  if (!decode_started_) {
    decode_t0_ = Clock::now();  // pure-decode clock (llama.cpp "eval time" caliber)
    decode_started_ = true;
  }
  if (options_.spec.enabled()) return step_speculative();
  MINFER_TRY(const SeqEvent ev, sample(logits_));
  if (!ev.feed) return false;
  // Forward last: logits for the next iteration.
  const auto tf = options_.timing ? Clock::now() : Clock::time_point{};
  const TokenId id = ev.token;
  MINFER_TRY(const int32_t pos, make_room(ev.pos));
  MINFER_CHECK(static_cast<size_t>(pos) == tokens_.size(), "feed at %d, %zu tokens in the KV", pos,
               tokens_.size());
  MINFER_TRY_STATUS(decode_run(std::span<const TokenId>(&id, 1), pos));
  tokens_.push_back(id);
  if (options_.timing) stats_.forward_s += seconds(Clock::now() - tf);
  stats_.n_forwards++;
  return true;
}

Result<bool> Generator::step_speculative() {
  const SpecOptions& spec = options_.spec;
  // The token to feed: sampled at the row that rejected the last draft, else now.
  TokenId id = pending_;
  int32_t pos = pending_pos_;
  if (id < 0) {
    MINFER_TRY(const SeqEvent ev, sample(logits_));
    if (!ev.feed) return false;
    id = ev.token;
    pos = ev.pos;
  }
  pending_ = -1;
  MINFER_TRY(pos, make_room(pos));
  MINFER_CHECK(static_cast<size_t>(pos) == tokens_.size(), "feed at %d, %zu tokens in the KV", pos,
               tokens_.size());
  tokens_.push_back(id);
  // The draft: at most the positions left in the context after `pos`, and one token fewer
  // than -n still allows (the row after the last draft samples one more).
  int32_t n_max =
      std::min<int32_t>(spec.n_max, static_cast<int32_t>(engine_.n_ctx_seq()) - 1 - pos);
  if (options_.n_predict >= 0) {
    n_max = std::min(n_max, options_.n_predict - state_->n_generated() - 1);
  }
  draft_.clear();
  if (n_max > 0) {
    const auto td = Clock::now();
    if (draft_model_) {
      if (Status st = draft_model_->draft(tokens_, n_max, spec.p_min, engine_.tokenizer().n_vocab(),
                                          draft_);
          !st.ok()) {
        tokens_.pop_back();
        return st.error();
      }
      stats_.n_draft_forwards = draft_model_->n_forwards();
    } else {
      ngram_draft(tokens_, spec.ngram, n_max, draft_);
    }
    stats_.draft_s += seconds(Clock::now() - td);
    if (draft_.size() < static_cast<size_t>(std::max(spec.n_min, 1))) draft_.clear();
  }
  // One forward: the token and the draft after it, every row asking for logits.
  const auto tf = options_.timing ? Clock::now() : Clock::time_point{};
  batch_.clear();
  batch_.add(id, 0, pos, true);
  for (size_t i = 0; i < draft_.size(); ++i) {
    batch_.add(draft_[i], 0, pos + 1 + static_cast<int32_t>(i), true);
  }
  auto out = engine_.decode(batch_);
  if (!out) {
    tokens_.pop_back();
    return out.error();
  }
  if (options_.timing) stats_.forward_s += seconds(Clock::now() - tf);
  stats_.n_forwards++;
  if (!draft_.empty()) stats_.n_spec_forwards++;
  stats_.n_drafted += static_cast<int64_t>(draft_.size());
  // Each row's logits are those the plain loop would have (batch invariance): sample them
  // in order; a draft token the sample agrees with is already in the KV at its position.
  for (size_t i = 0; i < draft_.size(); ++i) {
    const auto at = pos + 1 + static_cast<int32_t>(i);  // draft_[i]'s position
    MINFER_TRY(const SeqEvent ev, sample(out->row(i)));
    const bool agrees = ev.token == draft_[i];
    if (agrees) stats_.n_accepted++;
    if (!agrees || !ev.feed) {
      // The rows from here on hold tokens the run does not have: out of the KV.
      engine_.kv_cells()->seq_rm(0, at, -1);
      if (!ev.feed) return false;
      pending_ = ev.token;
      pending_pos_ = ev.pos;
      return true;
    }
    MINFER_CHECK(ev.pos == at, "draft token at %d, the sequence feeds at %d", at, ev.pos);
    tokens_.push_back(draft_[i]);
  }
  logits_ = out->row(draft_.size());
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
