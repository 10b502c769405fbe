// Stage 15 (the loop): sentence embeddings and cross-encoder scores (embed.h).
#include "engine/embed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/batch.h"

namespace minfer::engine {
namespace {

constexpr std::string_view kPoolingNames[] = {"none", "mean", "cls", "last", "rank"};

// Frees every sequence of one packed batch (also on error: no KV survives a call).
struct SeqGuard {
  Context& ctx;
  int32_t n_seq = 0;
  ~SeqGuard() {
    if (kv::KvCells* kv = ctx.kv_cells(); kv != nullptr) {
      for (int32_t s = 0; s < n_seq; ++s) kv->seq_rm(s, 0, -1);
    }
  }
};

}  // namespace

Result<Pooling> parse_pooling(std::string_view name) {
  for (size_t i = 0; i < std::size(kPoolingNames); ++i) {
    if (name == kPoolingNames[i]) return static_cast<Pooling>(i);
  }
  return make_error(
      fmt::format("unknown pooling '{}' (choose none, mean, cls, last or rank)", name));
}

std::string_view pooling_name(Pooling p) {
  const auto i = static_cast<int32_t>(p);
  return i >= 0 && i < 5 ? kPoolingNames[i] : std::string_view("model");
}

Pooling resolve_pooling(const Context& ctx, Pooling requested) {
  if (requested != Pooling::kModel) return requested;
  const int32_t t = ctx.hparams().pooling_type;
  // A cross-encoder's file need not say rank (llama.cpp's converter writes no
  // pooling_type for one); its head only scores pairs.
  if (t < 0 && ctx.hparams().n_cls_out > 0) return Pooling::kRank;
  return t >= 0 ? static_cast<Pooling>(t) : Pooling::kMean;
}

void normalize_embedding(std::span<float> v, int32_t mode) {
  double sum = 0.0;
  if (mode < 0) {
    return;
  } else if (mode == 0) {  // scaled so the largest magnitude is 32760 (int16 range)
    for (float x : v) sum = std::max(sum, static_cast<double>(std::fabs(x)));
    sum /= 32760.0;
  } else if (mode == 2) {
    for (float x : v) sum += static_cast<double>(x) * static_cast<double>(x);
    sum = std::sqrt(sum);
  } else {
    for (float x : v) sum += std::pow(std::fabs(static_cast<double>(x)), mode);
    sum = std::pow(sum, 1.0 / mode);
  }
  const float scale = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
  for (float& x : v) x *= scale;
}

Result<RankInput> rank_pair(const tokenizer::Tokenizer& tok, std::string_view query,
                            std::string_view document) {
  RankInput r;
  MINFER_TRY(r.tokens, tok.encode(query, {.add_special = true, .parse_special = false}));
  r.types.assign(r.tokens.size(), 0);
  MINFER_TRY(std::vector<TokenId> doc,
             tok.encode(document, {.add_special = true, .parse_special = false}));
  const tokenizer::SpecialIds& sp = tok.special();
  const size_t skip = sp.add_bos && !doc.empty() && doc.front() == sp.bos ? 1 : 0;
  r.tokens.insert(r.tokens.end(), doc.begin() + static_cast<ptrdiff_t>(skip), doc.end());
  r.types.resize(r.tokens.size(), 1);
  return r;
}

Result<Embeddings> embed(Context& ctx, std::span<const std::vector<TokenId>> inputs,
                         const EmbedOptions& options,
                         std::span<const std::vector<int32_t>> token_types) {
  const model::HParams& hp = ctx.hparams();
  if (!hp.embeddings_out) {
    return make_error(fmt::format(
        "model '{}' is a generative model, not an embedding model (an encoder such as bert)",
        hp.arch));
  }
  if (ctx.kv_cells() == nullptr) return make_error("embed: no context set (set_context first)");
  Embeddings out;
  out.pooling = resolve_pooling(ctx, options.pooling);
  const bool rank = out.pooling == Pooling::kRank;
  if (rank && hp.n_cls_out == 0) {
    return make_error(
        "pooling 'rank' needs a cross-encoder (a classification head, cls.output), which this "
        "model lacks");
  }
  if (!rank && hp.n_cls_out > 0) {
    return make_error(fmt::format(
        "this model is a cross-encoder (a classification head of {} output(s)): it scores "
        "pairs with pooling 'rank', it has no '{}' embeddings",
        hp.n_cls_out, pooling_name(out.pooling)));
  }
  if (!token_types.empty()) {
    if (token_types.size() != inputs.size()) {
      return make_error(
          fmt::format("{} token type lists for {} inputs", token_types.size(), inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (token_types[i].size() != inputs[i].size()) {
        return make_error(fmt::format("input {} has {} tokens but {} token types", i,
                                      inputs[i].size(), token_types[i].size()));
      }
    }
  }
  out.dim = static_cast<int32_t>(rank ? hp.n_cls_out : hp.n_embd);
  const uint32_t n_ctx_seq = ctx.n_ctx_seq();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return make_error(fmt::format("input {} has no tokens", i));
    if (inputs[i].size() > n_ctx_seq) {
      return make_error(fmt::format("input {} has {} tokens, more than the context of {}", i,
                                    inputs[i].size(), n_ctx_seq));
    }
  }
  out.vectors.resize(inputs.size());
  out.n_tokens.resize(inputs.size());
  const uint32_t budget = ctx.n_ctx();
  const uint32_t max_seqs = ctx.context_options().n_seq_max;
  const size_t dim = static_cast<size_t>(out.dim);
  Batch batch;
  size_t next = 0;
  while (next < inputs.size()) {
    // Pack inputs [first, next) in order under the token and sequence budgets.
    const size_t first = next;
    size_t tokens = 0;
    batch.clear();
    while (next < inputs.size() && next - first < max_seqs &&
           tokens + inputs[next].size() <= budget) {
      const std::vector<TokenId>& in = inputs[next];
      const auto seq = static_cast<SeqId>(next - first);
      for (size_t p = 0; p < in.size(); ++p) {
        const bool want = out.pooling == Pooling::kMean || out.pooling == Pooling::kNone ||
                          ((out.pooling == Pooling::kCls || rank) && p == 0) ||
                          (out.pooling == Pooling::kLast && p + 1 == in.size());
        batch.add(in[p], seq, static_cast<int32_t>(p), want,
                  token_types.empty() ? 0 : token_types[next][p]);
      }
      tokens += in.size();
      ++next;
    }
    SeqGuard guard{ctx, static_cast<int32_t>(next - first)};
    MINFER_TRY(const BatchLogits rows, ctx.decode(batch));
    size_t row = 0;
    for (size_t k = first; k < next; ++k) {
      const size_t n = inputs[k].size();
      out.n_tokens[k] = static_cast<int32_t>(n);
      std::vector<float>& v = out.vectors[k];
      if (out.pooling == Pooling::kNone) {
        v.resize(n * dim);
        for (size_t p = 0; p < n; ++p) {
          const std::span<const float> h = rows.row(row + p);
          std::copy(h.begin(), h.end(), v.begin() + static_cast<ptrdiff_t>(p * dim));
          normalize_embedding(std::span<float>(v).subspan(p * dim, dim), options.normalize);
        }
      } else if (out.pooling == Pooling::kMean) {
        // Per dimension, the rows summed in position order in double, then divided once.
        std::vector<double> sum(dim, 0.0);
        for (size_t p = 0; p < n; ++p) {
          const std::span<const float> h = rows.row(row + p);
          for (size_t d = 0; d < dim; ++d) sum[d] += static_cast<double>(h[d]);
        }
        v.resize(dim);
        for (size_t d = 0; d < dim; ++d) v[d] = static_cast<float>(sum[d] / static_cast<double>(n));
        normalize_embedding(v, options.normalize);
      } else if (rank) {  // the head's scores of the [CLS] row, as they are
        const std::span<const float> h = rows.row(row);
        v.assign(h.begin(), h.end());
      } else {
        const std::span<const float> h = rows.row(row + (out.pooling == Pooling::kCls ? 0 : n - 1));
        v.assign(h.begin(), h.end());
        normalize_embedding(v, options.normalize);
      }
      row += n;
    }
  }
  return out;
}

}  // namespace minfer::engine
