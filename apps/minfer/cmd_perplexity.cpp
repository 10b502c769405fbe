// Stage 18 (CLI): `minfer perplexity MODEL -f TEXT` — llama-perplexity's method and
// output: the whole text tokenized once (BOS first when the vocabulary adds one),
// non-overlapping chunks of n_ctx tokens, the first token of every chunk replaced by
// BOS where the vocabulary adds it, only the second half of each chunk scored (every
// scored token has at least n_ctx/2 tokens of context); the running `[i]ppl` values and
// `Final estimate: PPL = x +/- y`.
// `--kl-divergence-base FILE` also writes each scored row's log-probabilities in
// llama-perplexity's file format (its `_logits_` files and ours are interchangeable);
// `--kl-divergence` reads such a file (its tokens and n_ctx) and compares this model
// against it: ln(PPL ratio), KL divergence, Δp and top-1 agreement, per chunk and in
// llama-perplexity's closing statistics.
// Invariants: the arithmetic of every scored row is llama-perplexity's, operation by
// operation (float where it uses float, double where it uses double), so equal logits
// give equal digits; sums run in row order, so the result does not depend on the thread
// count (llama-perplexity adds per-thread partial sums in whatever order threads end);
// several chunks share one Context::decode as sequences (n_seq = n_batch / n_ctx).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/check.h"
#include "engine/batch.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "files.h"
#include "kv/cells.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
using engine::TokenId;

// llama-perplexity's float → int rounding (round half to even via the 1.5·2^23 trick).
int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i = 0;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// -log p(tok) of one row, as llama-perplexity's plain path computes it.
double row_nll(const float* logits, int n_vocab, int tok) {
  float max_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += expf(logits[i] - max_logit);
  const double log_softmax = logits[tok] - max_logit - std::log(sum_exp);
  return -log_softmax;
}

// The saving path: -log p(tok) (float arithmetic there) and the row's log-probabilities
// packed as llama-perplexity packs them: scale and minimum (2 floats) then one u16 per
// token over [max - 16, max] of the logits.
double row_nll_packed(const float* logits, int n_vocab, int tok, uint16_t* log_prob) {
  float max_logit = logits[0];
  float min_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += expf(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(log_prob, &scale, sizeof(float));
  std::memcpy(log_prob + 2, &min_log_prob, sizeof(float));
  log_prob += 4;
  if (scale != 0.0f) {
    const float inv_scale = 1 / scale;
    for (int i = 0; i < n_vocab; ++i) {
      log_prob[i] = logits[i] > min_logit
                        ? static_cast<uint16_t>(nearest_int(inv_scale * (logits[i] - min_logit)))
                        : 0;
    }
  } else {
    std::memset(log_prob, 0, static_cast<size_t>(n_vocab) * sizeof(uint16_t));
  }
  return max_logit + log_sum_exp - logits[tok];
}

// Per-row results of the KL comparison, added up in row order afterwards.
struct KldRow {
  float nll = 0, nll_base = 0;
  double kld = 0;
  float p_diff = 0;
  bool same_top = false;
};

KldRow row_kld(const float* logits, int n_vocab, const uint16_t* base_log_prob, int tok) {
  float max_logit = logits[0];
  int imax = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  }
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += expf(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale = 0, min_log_prob = 0;
  std::memcpy(&scale, base_log_prob, sizeof(float));
  std::memcpy(&min_log_prob, base_log_prob + 2, sizeof(float));
  base_log_prob += 4;
  KldRow r;
  r.nll = max_logit + log_sum_exp - logits[tok];
  r.nll_base = -(scale * base_log_prob[tok] + min_log_prob);
  max_logit += log_sum_exp;
  double sum = 0;
  int imax_base = -1;
  float p_log_base_max = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const float p_log_base = scale * base_log_prob[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) {
      const float p_base = expf(p_log_base);
      sum += p_base * (p_log_base - logits[i] + max_logit);
    }
  }
  r.kld = sum;
  r.same_top = imax == imax_base;
  const float p_base = expf(-r.nll_base);
  const float p = expf(-r.nll);
  r.p_diff = p - p_base;
  return r;
}

// Runs fn(i) for i in [0, n) on `threads` threads (static interleaving; results go to
// per-row slots, so the order of completion does not matter).
template <typename Fn>
void parallel_rows(int n, int threads, Fn fn) {
  threads = std::max(1, std::min(threads, n));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = t; i < n; i += threads) fn(i);
    });
  }
  for (int i = 0; i < n; i += threads) fn(i);
  for (auto& th : pool) th.join();
}

// llama-perplexity's helpers for the KL statistics.
std::pair<double, double> mean_and_uncertainty(double sum, double sum2, size_t count) {
  if (count < 1) return {0., 0.};
  double f = sum / static_cast<double>(count);
  double df = sum2 / static_cast<double>(count) - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / static_cast<double>(count - 1)) : 0.;
  return {f, df};
}

double covariance(double suma, double sumb, double sumab, size_t count) {
  if (count < 10) return 0.0;
  const double c = static_cast<double>(count);
  double var = sumab / c - (suma / c) * (sumb / c);
  var /= c - 1;
  return var;
}

float percentile(const std::vector<float>& values, float fraction) {
  if (fraction <= 0) return values.front();
  if (fraction >= 1) return values.back();
  float p = fraction * static_cast<float>(values.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * values[ip] + p * values[std::min(ip + 1, values.size() - 1)];
}

float median(const std::vector<float>& v) {
  return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
}

struct KldSums {
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0;
  size_t n_same_top = 0, count = 0;

  void add(const KldRow& r) {
    sum_nll += r.nll;
    sum_nll2 += r.nll * r.nll;
    sum_nll_base += r.nll_base;
    sum_nll_base2 += r.nll_base * r.nll_base;
    sum_nll_nll_base += r.nll * r.nll_base;
    sum_kld += r.kld;
    sum_kld2 += r.kld * r.kld;
    sum_p_diff += r.p_diff;
    const double p_diff2 = r.p_diff * r.p_diff;
    sum_p_diff2 += p_diff2;
    sum_p_diff4 += p_diff2 * p_diff2;
    max_p_diff = std::max(max_p_diff, std::fabs(r.p_diff));
    n_same_top += r.same_top ? 1 : 0;
    ++count;
  }
};

// The base-logits file: "_logits_", n_ctx (u32), n_vocab (i32), n_chunk (i32), the
// n_chunk·n_ctx evaluated tokens (i32), then per chunk (n_ctx - 1 - n_ctx/2) rows of
// nv = 2·((n_vocab + 1)/2) + 4 u16 each.
int packed_row_u16(int n_vocab) {
  return 2 * ((n_vocab + 1) / 2) + 4;
}

struct Options {
  std::string model_arg, text_file, kl_file;
  bool kl_divergence = false;
  int32_t n_ctx = 512, n_batch = 2048, n_chunks = -1, n_threads = 0;
  KvFlags kv;
};

// The chunk loop both modes share: evaluates chunks [0, n_chunk) of `tokens` in groups
// of n_seq sequences and calls on_chunk(chunk index, logits of rows first..n_ctx-1).
template <typename OnChunk>
Status run_chunks(engine::Context& e, std::vector<TokenId>& tokens, int n_ctx, int n_batch,
                  int n_seq, int n_chunk, bool add_bos, TokenId bos, double* seconds_first,
                  OnChunk on_chunk) {
  const int first = n_ctx / 2;
  const int num_batches = (n_ctx + n_batch - 1) / n_batch;
  const auto n_vocab = static_cast<size_t>(e.hparams().n_vocab);
  engine::Batch batch(static_cast<size_t>(n_batch));
  // Logit rows first..n_ctx-1 of each sequence of the group.
  std::vector<std::vector<float>> rows(static_cast<size_t>(n_seq));
  for (int i = 0; i < n_chunk; i += n_seq) {
    const int start = i * n_ctx;
    const int end = start + n_ctx;
    const int n_seq_batch = std::min(n_seq, n_chunk - i);
    const auto t0 = Clock::now();
    e.clear_kv();
    for (int s = 0; s < n_seq_batch; ++s) {
      auto range = e.kv_cells()->reserve(s, static_cast<uint32_t>(n_ctx));
      if (!range) return range.error();
      rows[static_cast<size_t>(s)].clear();
    }
    for (int j = 0; j < num_batches; ++j) {
      const int batch_start = start + j * n_batch;
      const int batch_size = std::min(end - batch_start, n_batch);
      batch.clear();
      for (int s = 0; s < n_seq_batch; ++s) {
        const int seq_start = batch_start + s * n_ctx;
        for (int k = 0; k < batch_size; ++k) {
          const int pos = j * n_batch + k;
          TokenId t = tokens[static_cast<size_t>(seq_start + k)];
          if (add_bos && j == 0 && k == 0) t = bos;  // the chunk starts with BOS
          batch.add(t, s, pos, pos >= first);
        }
      }
      if (batch.n_logits() == 0) {
        // No scored row in this batch (n_batch < n_ctx/2): llama.cpp still decodes it
        // to fill the cache; ask for the last row's logits and drop them.
        batch.clear();
        for (int k = 0; k < batch_size; ++k) {
          const int pos = j * n_batch + k;
          TokenId t = tokens[static_cast<size_t>(batch_start + k)];
          if (add_bos && j == 0 && k == 0) t = bos;
          batch.add(t, 0, pos, k == batch_size - 1);
        }
        MINFER_TRY(engine::BatchLogits unused, e.decode(batch));
        (void)unused;
        continue;
      }
      MINFER_TRY(engine::BatchLogits logits, e.decode(batch));
      for (size_t r = 0; r < batch.size(); ++r) {
        const engine::BatchRow& row = batch.rows()[r];
        if (!row.logits) continue;
        const std::span<const float> l = logits.row(r);
        auto& dst = rows[static_cast<size_t>(row.seq)];
        dst.insert(dst.end(), l.begin(), l.end());
      }
    }
    if (i == 0 && seconds_first != nullptr) {
      *seconds_first = std::chrono::duration<double>(Clock::now() - t0).count();
      const int total = static_cast<int>(*seconds_first * n_chunk / n_seq);
      fmt::print(stderr, "perplexity: {:.2f} seconds per pass - ETA {:.2f} minutes\n",
                 *seconds_first, total / 60.0);
    }
    for (int s = 0; s < n_seq_batch; ++s) {
      const auto& r = rows[static_cast<size_t>(s)];
      MINFER_CHECK(r.size() == static_cast<size_t>(n_ctx - first) * n_vocab,
                   "perplexity: %zu logits for chunk %d", r.size(), i + s);
      MINFER_TRY_STATUS(on_chunk(i + s, r.data()));
    }
  }
  return Ok{};
}

}  // namespace

int run_perplexity(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer perplexity MODEL -f TEXT [flags]\n"
      "llama-perplexity's method: non-overlapping chunks of N_CTX tokens, BOS first where the\n"
      "vocabulary adds it, the second half of each chunk scored; `[i]ppl` per chunk and\n"
      "`Final estimate: PPL = x +/- y` on stdout, progress on stderr");
  Options o;
  p.string_opt("-m,--model", "PATH", "GGUF path or a file name in the model cache", o.model_arg);
  p.string_opt("-f,--file", "PATH", "the text to score (bytes used exactly)", o.text_file);
  p.int_opt("-c,--ctx-size", "N", "tokens per chunk (512)", o.n_ctx, 4, 1 << 20);
  p.int_opt("-b,--batch-size", "N",
            "tokens per decode: below N_CTX a chunk takes several decodes; a multiple of\n"
            "N_CTX evaluates N/N_CTX chunks side by side (2048)",
            o.n_batch, 1, 1 << 22);
  p.int_opt("--chunks", "N", "score at most N chunks (all)", o.n_chunks, 1, INT32_MAX);
  p.int_opt("-t,--threads", "N", "CPU threads, the caller included (all cores)", o.n_threads, 1,
            4096);
  p.string_opt("--kl-divergence-base", "FILE",
               "write the scored rows' log-probabilities to FILE (llama-perplexity's format);\n"
               "with --kl-divergence, read them from FILE",
               o.kl_file);
  p.flag("--kl-divergence",
         "compare this model against --kl-divergence-base FILE (its tokens and n_ctx): "
         "KL\ndivergence, Δp, top-1 agreement; -f is not needed",
         [&] { o.kl_divergence = true; });
  add_kv_flags(p, o.kv);
  if (auto done = parse_model_command(p, args, "perplexity", o.model_arg)) return *done;
  if (auto n = ngl_notice(o.kv)) fmt::print(stderr, "notice: {}\n", *n);

  if (o.kl_divergence && o.kl_file.empty()) {
    return fail("perplexity: --kl-divergence needs --kl-divergence-base FILE (the base logits)");
  }
  if (!o.kl_divergence && o.text_file.empty()) {
    return fail("perplexity: no text given (-f TEXT)");
  }
  if (o.n_batch >= o.n_ctx && o.n_batch % o.n_ctx != 0) {
    return fail(fmt::format(
        "perplexity: -b {} must be below -c {} or a multiple of it (llama-perplexity's rule)",
        o.n_batch, o.n_ctx));
  }
  std::ifstream base_in;
  if (o.kl_divergence) {
    base_in.open(o.kl_file, std::ios::binary);
    if (!base_in) return fail("perplexity: cannot open '" + o.kl_file + "'");
  } else if (!o.kl_file.empty()) {
    if (auto st = check_writable(o.kl_file, "--kl-divergence-base"); !st.ok()) {
      return fail(st.error().message);
    }
  }
  std::string text;
  if (!o.kl_divergence) {
    auto content = read_input_file(o.text_file);
    if (!content) return fail(content.error().message);
    text = std::move(*content);
  }

  // Usage errors (--cache-type, --numerics) before the model is looked for.
  auto options = engine_options(o.n_threads, o.kv);
  if (!options) return fail(options.error().message);
  auto path = resolve_model_path(o.model_arg);
  if (!path) return fail(path.error().message);
  auto eng = open_engine(*path, *options);
  if (!eng) return fail(eng.error().message);
  engine::Engine& e = **eng;
  if (Status st = require_generative(e, "perplexity"); !st.ok()) return fail(st.error().message);
  if (!e.has_tokenizer()) return fail("perplexity: the model has no tokenizer");
  const tokenizer::Tokenizer& tok = e.tokenizer();
  const int n_vocab = static_cast<int>(e.hparams().n_vocab);
  const bool add_bos = tok.special().add_bos;
  const TokenId bos = tok.special().bos;
  if (add_bos && bos < 0) return fail("perplexity: the vocabulary adds BOS but has no BOS id");
  if (tok.special().add_eos) {
    return fail(
        "perplexity: the vocabulary appends EOS to every text (llama-perplexity refuses "
        "such models too)");
  }
  const int nv = packed_row_u16(n_vocab);

  std::vector<TokenId> tokens;
  int n_ctx = o.n_ctx;
  int n_chunk = 0;
  if (o.kl_divergence) {
    char magic[8] = {};
    uint32_t file_ctx = 0;
    int32_t file_vocab = 0, file_chunks = 0;
    base_in.read(magic, 8);
    if (!base_in || std::memcmp(magic, "_logits_", 8) != 0) {
      return fail("perplexity: '" + o.kl_file +
                  "' is not a logits file (no _logits_ header; write one with "
                  "--kl-divergence-base without --kl-divergence)");
    }
    base_in.read(reinterpret_cast<char*>(&file_ctx), sizeof(file_ctx));
    base_in.read(reinterpret_cast<char*>(&file_vocab), sizeof(file_vocab));
    base_in.read(reinterpret_cast<char*>(&file_chunks), sizeof(file_chunks));
    if (!base_in) return fail("perplexity: '" + o.kl_file + "' ends inside its header");
    if (file_vocab != n_vocab) {
      return fail(
          fmt::format("perplexity: '{}' was written for a vocabulary of {} tokens, the "
                      "model has {}",
                      o.kl_file, file_vocab, n_vocab));
    }
    if (file_ctx < 4 || file_ctx > (1u << 20) || file_chunks < 1) {
      return fail(fmt::format("perplexity: '{}' has n_ctx {} and {} chunks", o.kl_file, file_ctx,
                              file_chunks));
    }
    n_ctx = static_cast<int>(file_ctx);
    n_chunk = file_chunks;
    if (o.n_chunks > 0) n_chunk = std::min(n_chunk, o.n_chunks);
    tokens.resize(static_cast<size_t>(n_ctx) * static_cast<size_t>(file_chunks));
    base_in.read(reinterpret_cast<char*>(tokens.data()),
                 static_cast<std::streamsize>(tokens.size() * sizeof(TokenId)));
    if (!base_in) return fail("perplexity: '" + o.kl_file + "' ends inside its token list");
    for (TokenId t : tokens) {
      if (t < 0 || t >= n_vocab) {
        return fail(
            fmt::format("perplexity: '{}' holds token id {} outside the vocabulary", o.kl_file, t));
      }
    }
  } else {
    fmt::print(stderr, "perplexity: tokenizing the input ..\n");
    const auto t0 = Clock::now();
    auto ids = tok.encode(text, {.add_special = true, .parse_special = false});
    if (!ids) return fail(ids.error().message);
    tokens = std::move(*ids);
    fmt::print(stderr, "perplexity: tokenization took {:g} ms\n",
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (tokens.size() < 2 * static_cast<size_t>(n_ctx)) {
      return fail(fmt::format(
          "perplexity: the text tokenizes to {} tokens; a context of {} needs at least {}",
          tokens.size(), n_ctx, 2 * n_ctx));
    }
    const int n_chunk_max = static_cast<int>(tokens.size() / static_cast<size_t>(n_ctx));
    n_chunk = o.n_chunks < 0 ? n_chunk_max : std::min(o.n_chunks, n_chunk_max);
  }
  const int n_seq = std::max(1, o.n_batch / n_ctx);
  const int n_batch = std::min(o.n_batch, n_seq * n_ctx);
  if (o.kl_divergence && n_batch >= n_ctx && n_batch % n_ctx != 0) {
    return fail(
        fmt::format("perplexity: -b {} must be below the file's n_ctx {} or a multiple "
                    "of it",
                    n_batch, n_ctx));
  }
  engine::ContextOptions co{.n_cells = static_cast<uint32_t>(n_seq * n_ctx),
                            .n_seq_max = static_cast<uint32_t>(n_seq),
                            .n_ctx_seq = static_cast<uint32_t>(n_ctx)};
  if (auto st = e.set_context(co); !st.ok()) return fail(st.error().message);

  const int first = n_ctx / 2;
  const int n_scored = n_ctx - 1 - first;  // rows scored per chunk
  const int threads = e.n_threads();
  const auto t_start = Clock::now();
  double seconds_first = 0;

  if (!o.kl_divergence) {
    fmt::print(stderr,
               "perplexity: calculating perplexity over {} chunks, n_ctx={}, batch_size={}, "
               "n_seq={}\n",
               n_chunk, n_ctx, n_batch, n_seq);
    std::ofstream out;
    std::string tmp_path;
    if (!o.kl_file.empty()) {
      tmp_path = o.kl_file + ".tmp";
      out.open(tmp_path, std::ios::binary | std::ios::trunc);
      if (!out) return fail("perplexity: cannot create '" + tmp_path + "'");
      fmt::print(stderr, "perplexity: saving all logits to {}\n", o.kl_file);
      const uint32_t file_ctx = static_cast<uint32_t>(n_ctx);
      const int32_t file_vocab = n_vocab, file_chunks = n_chunk;
      out.write("_logits_", 8);
      out.write(reinterpret_cast<const char*>(&file_ctx), sizeof(file_ctx));
      out.write(reinterpret_cast<const char*>(&file_vocab), sizeof(file_vocab));
      out.write(reinterpret_cast<const char*>(&file_chunks), sizeof(file_chunks));
      out.write(reinterpret_cast<const char*>(tokens.data()),
                static_cast<std::streamsize>(static_cast<size_t>(n_chunk) *
                                             static_cast<size_t>(n_ctx) * sizeof(TokenId)));
    }
    std::vector<uint16_t> packed(
        o.kl_file.empty() ? 0 : static_cast<size_t>(n_scored) * static_cast<size_t>(nv));
    std::vector<double> nll_rows(static_cast<size_t>(n_scored));
    double nll = 0, nll2 = 0;
    int count = 0;
    Status st = run_chunks(
        e, tokens, n_ctx, n_batch, n_seq, n_chunk, add_bos, bos, &seconds_first,
        [&](int chunk, const float* logits) -> Status {
          const TokenId* toks = tokens.data() + static_cast<size_t>(chunk) * n_ctx + first;
          parallel_rows(n_scored, threads, [&](int r) {
            const float* row = logits + static_cast<size_t>(r) * static_cast<size_t>(n_vocab);
            nll_rows[static_cast<size_t>(r)] =
                packed.empty() ? row_nll(row, n_vocab, toks[r + 1])
                               : row_nll_packed(row, n_vocab, toks[r + 1],
                                                packed.data() + static_cast<size_t>(r) * nv);
          });
          for (double v : nll_rows) {
            nll += v;
            nll2 += v * v;
          }
          if (!packed.empty()) {
            out.write(reinterpret_cast<const char*>(packed.data()),
                      static_cast<std::streamsize>(packed.size() * sizeof(uint16_t)));
            if (!out) return make_error("cannot write '" + tmp_path + "'");
          }
          count += n_ctx - first - 1;
          fmt::print("[{}]{:.4f},", chunk + 1, std::exp(nll / count));
          std::fflush(stdout);
          return Ok{};
        });
    if (!st.ok()) {
      if (!tmp_path.empty()) std::remove(tmp_path.c_str());
      return fail("perplexity: " + st.error().message);
    }
    fmt::print("\n");
    if (!tmp_path.empty()) {
      out.close();
      if (!out || std::rename(tmp_path.c_str(), o.kl_file.c_str()) != 0) {
        std::remove(tmp_path.c_str());
        return fail("perplexity: cannot write '" + o.kl_file + "'");
      }
    }
    nll2 /= count;
    nll /= count;
    const double ppl = std::exp(nll);
    nll2 -= nll * nll;
    if (nll2 > 0) {
      nll2 = std::sqrt(nll2 / (count - 1));
      fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", ppl, nll2 * ppl);
    } else {
      return fail("perplexity: unexpected negative variance of log(prob)");
    }
  } else {
    fmt::print(stderr,
               "kl_divergence: computing over {} chunks, n_ctx={}, batch_size={}, n_seq={}\n",
               n_chunk, n_ctx, n_batch, n_seq);
    std::vector<uint16_t> base(static_cast<size_t>(n_scored) * static_cast<size_t>(nv));
    std::vector<KldRow> krows(static_cast<size_t>(n_scored));
    std::vector<float> kld_values, p_diff_values;
    KldSums kld;
    bool header = false;
    Status st = run_chunks(
        e, tokens, n_ctx, n_batch, n_seq, n_chunk, add_bos, bos, &seconds_first,
        [&](int chunk, const float* logits) -> Status {
          base_in.read(reinterpret_cast<char*>(base.data()),
                       static_cast<std::streamsize>(base.size() * sizeof(uint16_t)));
          if (!base_in) {
            return make_error(fmt::format("'{}' ends before the log-probabilities of chunk {}",
                                          o.kl_file, chunk + 1));
          }
          if (!header) {
            fmt::print(
                "\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL "
                "Divergence              Δp RMS            Same top p\n");
            header = true;
          }
          const TokenId* toks = tokens.data() + static_cast<size_t>(chunk) * n_ctx + first;
          parallel_rows(n_scored, threads, [&](int r) {
            krows[static_cast<size_t>(r)] =
                row_kld(logits + static_cast<size_t>(r) * static_cast<size_t>(n_vocab), n_vocab,
                        base.data() + static_cast<size_t>(r) * nv, toks[r + 1]);
          });
          for (const KldRow& r : krows) {
            kld.add(r);
            kld_values.push_back(static_cast<float>(r.kld));
            p_diff_values.push_back(r.p_diff);
          }
          std::string line = fmt::format("{:4d}", chunk + 1);
          const auto log_ppl = mean_and_uncertainty(kld.sum_nll, kld.sum_nll2, kld.count);
          const double ppl_val = std::exp(log_ppl.first);
          line += fmt::format("    {:9.4f} ± {:9.4f}", ppl_val, ppl_val * log_ppl.second);
          const auto log_ppl_base =
              mean_and_uncertainty(kld.sum_nll_base, kld.sum_nll_base2, kld.count);
          const double cov =
              covariance(kld.sum_nll, kld.sum_nll_base, kld.sum_nll_nll_base, kld.count);
          line += fmt::format("    {:10.5f} ± {:10.5f}", log_ppl.first - log_ppl_base.first,
                              std::sqrt(log_ppl.second * log_ppl.second +
                                        log_ppl_base.second * log_ppl_base.second - 2.0 * cov));
          const auto kl = mean_and_uncertainty(kld.sum_kld, kld.sum_kld2, kld.count);
          line += fmt::format("    {:10.5f} ± {:10.5f}", kl.first, kl.second);
          const auto mse = mean_and_uncertainty(kld.sum_p_diff2, kld.sum_p_diff4, kld.count);
          const double rms = std::sqrt(mse.first);
          line +=
              fmt::format("    {:6.3f} ± {:6.3f} %", 100.0 * rms, 100.0 * (0.5 / rms * mse.second));
          const double top =
              1. * static_cast<double>(kld.n_same_top) / static_cast<double>(kld.count);
          line +=
              fmt::format("    {:6.3f} ± {:6.3f} %", 100.0 * top,
                          100.0 * std::sqrt(top * (1 - top) / static_cast<double>(kld.count - 1)));
          fmt::print("{}\n", line);
          std::fflush(stdout);
          return Ok{};
        });
    if (!st.ok()) return fail("perplexity: " + st.error().message);
    fmt::print("\n");
    if (kld.count >= 100) {  // llama-perplexity prints no statistics for fewer rows
      std::sort(kld_values.begin(), kld_values.end());
      std::sort(p_diff_values.begin(), p_diff_values.end());
      std::string s = "====== Perplexity statistics ======\n";
      const auto log_ppl = mean_and_uncertainty(kld.sum_nll, kld.sum_nll2, kld.count);
      const double ppl_val = std::exp(log_ppl.first);
      const double ppl_unc = ppl_val * log_ppl.second;
      s += fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", ppl_val, ppl_unc);
      const auto log_ppl_base =
          mean_and_uncertainty(kld.sum_nll_base, kld.sum_nll_base2, kld.count);
      const double ppl_base_val = std::exp(log_ppl_base.first);
      const double ppl_base_unc = ppl_base_val * log_ppl_base.second;
      s += fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", ppl_base_val,
                       ppl_base_unc);
      const double cov = covariance(kld.sum_nll, kld.sum_nll_base, kld.sum_nll_nll_base, kld.count);
      s += fmt::format("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n",
                       100.0 * cov / (log_ppl.second * log_ppl_base.second));
      const double ratio = log_ppl.first - log_ppl_base.first;
      const double ratio_unc = std::sqrt(log_ppl.second * log_ppl.second +
                                         log_ppl_base.second * log_ppl_base.second - 2.0 * cov);
      s += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", ratio, ratio_unc);
      s += fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", std::exp(ratio),
                       std::exp(ratio) * ratio_unc);
      const double ppl_cov = ppl_val * ppl_base_val * cov;
      s += fmt::format("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n",
                       ppl_val - ppl_base_val,
                       std::sqrt(ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov));
      s += "\n====== KL divergence statistics ======\n";
      const auto kl = mean_and_uncertainty(kld.sum_kld, kld.sum_kld2, kld.count);
      s += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", kl.first, kl.second);
      s += fmt::format("Maximum KLD: {:10.6f}\n", kld_values.back());
      const std::pair<const char*, float> kq[] = {
          {"99.9%  ", 0.999f}, {"99.0%  ", 0.990f}, {"95.0%  ", 0.950f}, {"90.0%  ", 0.900f}};
      for (const auto& [label, f] : kq) {
        s += fmt::format("{} KLD: {:10.6f}\n", label, percentile(kld_values, f));
      }
      s += fmt::format("Median  KLD: {:10.6f}\n", median(kld_values));
      const std::pair<const char*, float> kl_low[] = {
          {"10.0%  ", 0.100f}, {" 5.0%  ", 0.050f}, {" 1.0%  ", 0.010f}, {" 0.1%  ", 0.001f}};
      for (const auto& [label, f] : kl_low) {
        s += fmt::format("{} KLD: {:10.6f}\n", label, percentile(kld_values, f));
      }
      s += fmt::format("Minimum KLD: {:10.6f}\n", kld_values.front());
      s += "\n====== Token probability statistics ======\n";
      const auto pd = mean_and_uncertainty(kld.sum_p_diff, kld.sum_p_diff2, kld.count);
      s += fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100.0 * pd.first, 100.0 * pd.second);
      s += fmt::format("Maximum Δp: {:6.3f}%\n", 100.0 * p_diff_values.back());
      const std::pair<const char*, float> pq[] = {{"99.9%  ", 0.999f},
                                                  {"99.0%  ", 0.990f},
                                                  {"95.0%  ", 0.950f},
                                                  {"90.0%  ", 0.900f},
                                                  {"75.0%  ", 0.750f}};
      for (const auto& [label, f] : pq) {
        s += fmt::format("{} Δp: {:6.3f}%\n", label, 100.0 * percentile(p_diff_values, f));
      }
      s += fmt::format("Median  Δp: {:6.3f}%\n", 100.0 * median(p_diff_values));
      const std::pair<const char*, float> pl[] = {{"25.0%  ", 0.250f},
                                                  {"10.0%  ", 0.100f},
                                                  {" 5.0%  ", 0.050f},
                                                  {" 1.0%  ", 0.010f},
                                                  {" 0.1%  ", 0.001f}};
      for (const auto& [label, f] : pl) {
        s += fmt::format("{} Δp: {:6.3f}%\n", label, 100.0 * percentile(p_diff_values, f));
      }
      s += fmt::format("Minimum Δp: {:6.3f}%\n", 100.0 * p_diff_values.front());
      const auto mse = mean_and_uncertainty(kld.sum_p_diff2, kld.sum_p_diff4, kld.count);
      const double rms = std::sqrt(mse.first);
      s += fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100.0 * rms,
                       100.0 * (0.5 / rms * mse.second));
      const double top = 1.0 * static_cast<double>(kld.n_same_top) / static_cast<double>(kld.count);
      s += fmt::format("Same top p: {:6.3f} ± {:5.3f} %\n", 100.0 * top,
                       100.0 * std::sqrt(top * (1.0 - top) / static_cast<double>(kld.count - 1)));
      std::fputs(s.c_str(), stdout);
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
  const double n_eval = static_cast<double>(n_chunk) * n_ctx;
  fmt::print(stderr, "perplexity: {} tokens evaluated in {:.2f} s ({:.2f} tokens per second)\n",
             static_cast<int64_t>(n_eval), secs, n_eval / secs);
  return 0;
}

}  // namespace minfer::cli
