// Stage 15 (the loop): one sequence's generation state (sample → gates → text).
#include "engine/sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace minfer::engine {

std::string_view seq_stop_name(SeqStop stop) {
  switch (stop) {
    case SeqStop::kNone:
      return "none";
    case SeqStop::kNPredict:
      return "n_predict";
    case SeqStop::kEog:
      return "eog";
    case SeqStop::kStopString:
      return "stop string";
    case SeqStop::kContext:
      return "context full";
  }
  return "?";
}

Result<std::unique_ptr<SequenceState>> SequenceState::create(
    const tokenizer::Tokenizer& tok, const TokenBytes& bytes, const SequenceOptions& options,
    std::unique_ptr<TokenConstraint> constraint) {
  if (options.n_ctx == 0) return make_error("sequence: n_ctx must be > 0");
  MINFER_TRY(sample::Sampler sampler, sample::Sampler::create(options.sampler, tok.n_vocab()));
  return std::unique_ptr<SequenceState>(
      new SequenceState(tok, bytes, options, std::move(sampler), std::move(constraint)));
}

SequenceState::SequenceState(const tokenizer::Tokenizer& tok, const TokenBytes& bytes,
                             const SequenceOptions& options, sample::Sampler sampler,
                             std::unique_ptr<TokenConstraint> constraint)
    : tok_(&tok),
      bytes_(&bytes),
      options_(options),
      sampler_(std::move(sampler)),
      stops_(options.stop, bytes.max_len()),
      emitter_([this](std::string_view s) { out_.append(s); }),
      splitter_(options.reasoning.forced_open),
      reasoning_emitter_([this](std::string_view s) { reasoning_out_.append(s); }) {
  size_t max_stop = 0;
  for (const std::string& s : options_.stop) max_stop = std::max(max_stop, s.size());
  out_.reserve(3 * (max_stop + bytes.max_len()) + 8);  // U+FFFD is 3 bytes per bad byte
  const size_t cap = options_.n_predict >= 0
                         ? std::min<size_t>(static_cast<size_t>(options_.n_predict), options_.n_ctx)
                         : options_.n_ctx;
  generated_.reserve(cap);
  if (options_.top_logprobs > 0) top_.reserve(static_cast<size_t>(options_.top_logprobs) + 1);
  constraint_ = std::move(constraint);
  if (options_.ignore_eos) {
    for (TokenId id = 0; id < tok.n_vocab(); ++id) {
      if (tok.is_eog(id)) eog_ids_.push_back(id);
    }
  }
  if (constraint_ || options_.ignore_eos) masked_.reserve(static_cast<size_t>(tok.n_vocab()));
}

void SequenceState::reset(std::span<const TokenId> prompt) {
  sampler_.reset(prompt);
  emitter_ = Utf8Emitter([this](std::string_view s) { out_.append(s); });
  stops_.reset();
  if (constraint_) constraint_->reset();
  out_.clear();
  splitter_.reset();
  reasoning_emitter_ = Utf8Emitter([this](std::string_view s) { reasoning_out_.append(s); });
  reasoning_out_.clear();
  n_forced_ = 0;
  forcing_ = false;
  n_reasoning_ = 0;
  generated_.clear();
  n_prompt_ = static_cast<int32_t>(prompt.size());
  n_generated_ = 0;
  pos_ = n_prompt_;
  stop_ = SeqStop::kNone;
}

void SequenceState::discard(int32_t n) {
  MINFER_CHECK(options_.context_shift && n >= 0 && n <= pos_,
               "discard %d positions: context_shift %d, cursor %d", n,
               static_cast<int>(options_.context_shift), pos_);
  pos_ -= n;
}

bool SequenceState::push_bytes(std::string_view bytes) {
  // A thinking block first: its bytes go to the reasoning (their own UTF-8 emitter), the
  // answer's on to the stop strings. Not split: the splitter only tracks the phase.
  if (options_.reasoning.track) {
    split_reasoning_.clear();
    split_content_.clear();
    splitter_.feed(bytes, split_reasoning_, split_content_);
    if (options_.reasoning.split) {
      reasoning_emitter_.feed(split_reasoning_);
      bytes = split_content_;
    }
  }
  // bytes → StopMatcher (holds a possible stop-string start) → Utf8Emitter.
  const StopMatcher::Feed f = stops_.feed(bytes);
  emitter_.feed(f.text);
  if (f.stopped) emitter_.flush();
  return f.stopped;
}

void SequenceState::finish_text() {
  // The run is over: a held stop prefix did not become a stop string, so it is text;
  // an unfinished UTF-8 sequence at the very end becomes U+FFFD (Utf8Emitter::flush).
  // A thinking block's held bytes are its text too (an unclosed block's reasoning).
  if (options_.reasoning.track) {
    split_reasoning_.clear();
    split_content_.clear();
    splitter_.flush(split_reasoning_, split_content_);
    if (options_.reasoning.split) {
      reasoning_emitter_.feed(split_reasoning_);
      reasoning_emitter_.flush();
      if (!stops_.stopped()) emitter_.feed(stops_.feed(split_content_).text);
    }
  }
  emitter_.feed(stops_.flush());
  emitter_.flush();
}

std::string_view SequenceState::flush() {
  out_.clear();
  reasoning_out_.clear();
  if (!done()) finish_text();
  return out_;
}

void SequenceState::fill_logprobs(std::span<const float> logits, TokenId chosen, SeqEvent& ev) {
  // log-softmax over the raw logits (the model's distribution, before sampling stages).
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const float log_z = max + static_cast<float>(std::log(sum));
  ev.logprob = logits[static_cast<size_t>(chosen)] - log_z;
  top_.clear();
  const auto k = static_cast<size_t>(options_.top_logprobs);
  if (k == 0) return;
  // A bounded insertion over the vocabulary (k is small, <= 20): ties keep the lower id.
  for (size_t id = 0; id < logits.size(); ++id) {
    const float lp = logits[id] - log_z;
    if (top_.size() == k && lp <= top_.back().logprob) continue;
    TokenLogprob t{.token = static_cast<TokenId>(id), .logprob = lp};
    auto it = std::upper_bound(
        top_.begin(), top_.end(), t,
        [](const TokenLogprob& a, const TokenLogprob& b) { return a.logprob > b.logprob; });
    top_.insert(it, t);  // capacity k + 1: no reallocation
    if (top_.size() > k) top_.pop_back();
  }
  ev.top = top_;
}

Result<SeqEvent> SequenceState::next(std::span<const float> logits) {
  SeqEvent ev;
  out_.clear();
  reasoning_out_.clear();
  if (done()) {
    ev.stop = stop_;
    return ev;
  }
  // Gates at the head: a run allowed no tokens at all; a full context, where the
  // driver asked for that gate before sampling.
  if (options_.n_predict >= 0 && n_generated_ >= options_.n_predict) {
    stop_ = SeqStop::kNPredict;
  } else if (options_.context_gate_first && !options_.context_shift &&
             static_cast<uint32_t>(pos_) >= options_.n_ctx) {
    stop_ = SeqStop::kContext;
  }
  if (stop_ != SeqStop::kNone) {
    finish_text();
    ev.stop = stop_;
    ev.text = out_;
    ev.reasoning = reasoning_out_;
    return ev;
  }
  // Inside a thinking block sampling is free: the constraint (a grammar, a schema)
  // starts with the answer. A block past its budget is closed by feeding the close
  // tokens instead of sampling (once).
  const bool thinking =
      options_.reasoning.track && splitter_.phase() == ThinkSplitter::Phase::kThinking;
  TokenConstraint* const constraint = in_answer() ? constraint_.get() : nullptr;
  const std::vector<TokenId>& close_tokens = options_.reasoning.close_tokens;
  if (thinking && n_forced_ == 0 && options_.reasoning.budget >= 0 &&
      n_reasoning_ >= options_.reasoning.budget && !close_tokens.empty()) {
    forcing_ = true;
  }
  if (forcing_) {
    const TokenId forced = close_tokens[n_forced_++];
    forcing_ = n_forced_ < close_tokens.size();
    return step_token(logits, forced, /*forced=*/true, nullptr);
  }
  // A constraint is first asked about the sampler's best candidates one by one (the
  // same token as masking would give, see Sampler::sample_filtered); only where that
  // cannot decide is the whole vocabulary masked, on a copy: logprobs still report the
  // model's own distribution.
  std::optional<TokenId> filtered;
  if (constraint != nullptr && !constraint->mask_ready()) {
    struct Filter final : sample::TokenFilter {
      TokenConstraint* constraint;
      const tokenizer::Tokenizer* tok;
      bool ban_eog;
      int allows(TokenId id) override {
        if (ban_eog && tok->is_eog(id)) return 0;
        return constraint->allows(id);
      }
    } filter;
    filter.constraint = constraint;
    filter.tok = tok_;
    filter.ban_eog = options_.ignore_eos;
    MINFER_TRY(filtered, sampler_.sample_filtered(logits, filter));
  }
  std::span<const float> to_sample = logits;
  if (!filtered && (constraint != nullptr || options_.ignore_eos)) {
    masked_.assign(logits.begin(), logits.end());  // sized once: no allocation
    for (TokenId e : eog_ids_) {
      if (static_cast<size_t>(e) < masked_.size()) {
        masked_[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
      }
    }
    if (constraint != nullptr) MINFER_TRY_STATUS(constraint->apply(masked_));
    to_sample = masked_;
  }
  TokenId id = 0;
  if (filtered) {
    id = *filtered;
  } else {
    MINFER_TRY(id, sampler_.sample(to_sample));
  }
  if (thinking) n_reasoning_++;
  return step_token(logits, id, /*forced=*/false, constraint);
}

SeqEvent SequenceState::step_token(std::span<const float> logits, TokenId id, bool forced,
                                   TokenConstraint* constraint) {
  SeqEvent ev;
  ev.token = id;
  if (options_.top_logprobs >= 0) fill_logprobs(logits, id, ev);

  // End of generation: not emitted, not accepted, no forward.
  if (!forced && tok_->is_eog(id)) {
    stop_ = SeqStop::kEog;
    finish_text();
    ev.stop = stop_;
    ev.text = out_;
    ev.reasoning = reasoning_out_;
    return ev;
  }
  sampler_.accept(id);
  if (constraint != nullptr) constraint->accept(id);
  generated_.push_back(id);
  n_generated_++;

  if (push_bytes((*bytes_)[id])) {
    stop_ = SeqStop::kStopString;
  } else if (options_.n_predict >= 0 && n_generated_ >= options_.n_predict) {
    stop_ = SeqStop::kNPredict;  // stop now: the forward of this token would be wasted
    finish_text();
    if (options_.feed_last &&
        (options_.context_shift || static_cast<uint32_t>(pos_) < options_.n_ctx)) {
      ev.feed = true;  // ... unless the driver keeps the whole reply in the KV
      ev.pos = pos_++;
    }
  } else if (!options_.context_shift && static_cast<uint32_t>(pos_) >= options_.n_ctx) {
    stop_ = SeqStop::kContext;  // the KV cannot take this token's position
    finish_text();
  } else {
    ev.feed = true;
    ev.pos = pos_++;
  }
  ev.stop = stop_;
  ev.text = out_;
  ev.reasoning = reasoning_out_;
  return ev;
}

}  // namespace minfer::engine
