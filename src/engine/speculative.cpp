// Stage 15 (the loop): speculative decoding's drafters and the draft-vocabulary check.
#include "engine/speculative.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace minfer::engine {
namespace {

// llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID
// (common/speculative.cpp): a draft may have a few more or fewer (padding) tokens, and
// the first ids (its control tokens) are not compared by text.
constexpr int32_t kMaxVocabDifference = 128;
constexpr int32_t kFirstComparedToken = 5;

std::string show(TokenId id) {
  return id == tokenizer::kNoToken ? std::string("none") : std::to_string(id);
}

}  // namespace

Status check_draft_vocab(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft) {
  const auto fail = [](const std::string& what) {
    return make_error("the draft model's vocabulary differs from the target's: " + what +
                      " (a draft model must share the target's tokenizer)");
  };
  if (target.model_name() != draft.model_name()) {
    return fail(fmt::format("the draft's tokenizer model is '{}', the target's '{}'",
                            draft.model_name(), target.model_name()));
  }
  const tokenizer::SpecialIds& t = target.special();
  const tokenizer::SpecialIds& d = draft.special();
  if (t.bos != d.bos || t.eos != d.eos || t.add_bos != d.add_bos || t.add_eos != d.add_eos) {
    return fail(fmt::format(
        "special tokens: draft BOS {} EOS {} (add BOS {}, add EOS {}), target BOS {} EOS {} "
        "(add BOS {}, add EOS {})",
        show(d.bos), show(d.eos), d.add_bos, d.add_eos, show(t.bos), show(t.eos), t.add_bos,
        t.add_eos));
  }
  const int32_t n_t = target.n_vocab();
  const int32_t n_d = draft.n_vocab();
  if (std::abs(n_t - n_d) > kMaxVocabDifference) {
    return fail(fmt::format("{} tokens vs the target's {} (at most {} apart)", n_d, n_t,
                            kMaxVocabDifference));
  }
  for (TokenId id = kFirstComparedToken; id < std::min(n_t, n_d); ++id) {
    if (target.token_text(id) != draft.token_text(id)) {
      return fail(fmt::format("token {} is '{}' in the draft, '{}' in the target", id,
                              draft.token_text(id), target.token_text(id)));
    }
  }
  return Ok{};
}

size_t ngram_draft(std::span<const TokenId> history, int32_t n, int32_t n_max,
                   std::vector<TokenId>& out) {
  const auto len = static_cast<int64_t>(history.size());
  if (n <= 0 || n_max <= 0 || len < static_cast<int64_t>(n) + 1) return 0;
  const std::span<const TokenId> key = history.last(static_cast<size_t>(n));
  // The latest start j < len - n whose n tokens equal the key: the most recent context is
  // the likeliest to repeat (llama.cpp's ngram-simple takes the last match too).
  for (int64_t j = len - n - 1; j >= 0; --j) {
    if (!std::equal(key.begin(), key.end(), history.begin() + j)) continue;
    const size_t first = out.size();
    for (int64_t t = 0; t < n_max; ++t) {
      const int64_t at = j + n + t;  // < len + t: the history, then what is drafted here
      const TokenId id =
          at < len ? history[static_cast<size_t>(at)] : out[first + static_cast<size_t>(at - len)];
      out.push_back(id);
    }
    return out.size() - first;
  }
  return 0;
}

std::optional<TokenId> draft_token(std::span<const float> logits, float p_min,
                                   int32_t n_vocab_target) {
  if (logits.empty()) return std::nullopt;
  // The most likely token (the lowest id among equals) and its softmax probability.
  size_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - logits[best]);
  const double p = 1.0 / sum;
  if (!(p >= p_min) || static_cast<int64_t>(best) >= n_vocab_target) return std::nullopt;
  return static_cast<TokenId>(best);
}

DraftModel::DraftModel(Context& ctx, int32_t n_batch, int32_t n_max)
    : ctx_(ctx), n_batch_(n_batch), batch_(static_cast<size_t>(std::max(n_max, 2))) {
  kv_tokens_.reserve(ctx.n_ctx_seq());
}

Status DraftModel::draft(std::span<const TokenId> history, int32_t n_max, float p_min,
                         int32_t n_vocab_target, std::vector<TokenId>& out) {
  if (history.empty() || n_max <= 0) return Ok{};
  kv::KvCells* kv = ctx_.kv_cells();
  if (kv == nullptr) return make_error("draft model: no context (set_n_ctx)");
  if (history.size() + static_cast<size_t>(n_max) > ctx_.n_ctx_seq() + 1) {
    return make_error(fmt::format("draft model: {} tokens and {} drafted past its context of {}",
                                  history.size(), n_max, ctx_.n_ctx_seq()));
  }
  // Keep the longest common prefix of the KV and the history, less its last token at
  // least: its logits are gone (another forward ran since), so it is decoded again.
  size_t keep = 0;
  const size_t common = std::min(kv_tokens_.size(), history.size());
  while (keep < common && kv_tokens_[keep] == history[keep]) ++keep;
  keep = std::min(keep, history.size() - 1);
  kv->seq_rm(0, static_cast<kv::Pos>(keep), -1);
  kv_tokens_.resize(keep);
  std::span<const float> logits;
  const size_t chunk = n_batch_ > 0 ? static_cast<size_t>(n_batch_) : history.size();
  for (size_t at = keep; at < history.size(); at += chunk) {
    const size_t n = std::min(chunk, history.size() - at);
    batch_.clear();
    batch_.add_run(history.subspan(at, n), 0, static_cast<int32_t>(at));
    auto decoded = ctx_.decode(batch_);
    if (!decoded) return decoded.error().context("draft model");
    n_forwards_++;
    kv_tokens_.insert(kv_tokens_.end(), history.begin() + static_cast<int64_t>(at),
                      history.begin() + static_cast<int64_t>(at + n));
    logits = decoded->row(n - 1);
  }
  for (int32_t i = 0; i < n_max; ++i) {
    const std::optional<TokenId> pick = draft_token(logits, p_min, n_vocab_target);
    if (!pick) break;
    const TokenId id = *pick;
    out.push_back(id);
    // The last drafted token needs no forward; nothing follows an end of generation.
    if (i + 1 == n_max || ctx_.tokenizer().is_eog(id)) break;
    batch_.clear();
    batch_.add(id, 0, static_cast<int32_t>(kv_tokens_.size()), true);
    auto decoded = ctx_.decode(batch_);
    if (!decoded) return decoded.error().context("draft model");
    n_forwards_++;
    kv_tokens_.push_back(id);
    logits = decoded->row(0);
  }
  return Ok{};
}

}  // namespace minfer::engine
