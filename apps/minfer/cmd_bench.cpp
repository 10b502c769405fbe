// Stage 18 (CLI): `minfer bench MODEL` — llama-bench shaped throughput: pp<N> (one
// forward of N prompt tokens) and tg<N> (N single-token forwards with greedy argmax
// sampling), mean ± stddev over reps, plus the weight bandwidth a tg rate implies.
// Benchmarks are not tests (ARCHITECTURE §5): nothing here asserts a speed.
// Method (docs/PERFORMANCE.md): synthetic ids (i·7919 + 13) mod n_vocab; one untimed
// warm-up rep per test; every rep restarts at position 0 in the same graph cache
// (clear_kv: cells freed, regions untouched — attention reads only positions ≤ pos).
// `--parallel N` (llama-batched-bench's -npl): tg<M>xN decodes N sequences side by side,
// one Context::decode of N rows per step, each sequence in its own reserved cells (as
// the server runs them); its t/s counts every sequence's tokens.
// `-d/--n-depth N` (llama-bench's): before each rep, N synthetic tokens are prefilled
// untimed, so pp<N>@d<D> and tg<N>@d<D> measure a prompt or decode over a D-token KV.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine/batch.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "kv/cells.h"
#include "model_path.h"
#include "run_flags.h"

namespace minfer::cli {
namespace {

struct BenchResult {
  std::string test;  // "pp512", "tg128"
  int32_t n_prompt = 0, n_gen = 0;
  int32_t n_depth = 0;  // tokens in the KV before the timed part (untimed prefill)
  int32_t threads = 0;
  std::vector<double> samples;       // tok/s per rep
  std::vector<uint64_t> samples_ns;  // wall time per rep
  std::vector<uint64_t> cpu_ns;      // process CPU time per rep (all threads)
  int32_t n_parallel = 1;            // sequences decoded per step (tg only)
  double mean = 0.0, stddev = 0.0;
  double mean_ns = 0.0, stddev_ns = 0.0;
  double gbps = 0.0;  // tg: weight bytes per token × mean tok/s
};

template <typename T>
std::pair<double, double> mean_stddev(const std::vector<T>& v) {
  const double n = static_cast<double>(v.size());
  double sum = 0.0;
  for (T x : v) sum += static_cast<double>(x);
  const double mean = sum / n;
  double ss = 0.0;
  for (T x : v) ss += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / (n - 1.0)) : 0.0};  // llama-bench: n−1
}

void summarize(BenchResult& r) {
  std::tie(r.mean, r.stddev) = mean_stddev(r.samples);
  std::tie(r.mean_ns, r.stddev_ns) = mean_stddev(r.samples_ns);
}

using Clock = std::chrono::steady_clock;

uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// Bytes of weights one decoded token reads: every matrix once, except the token
// embedding table (one row per token) unless it doubles as the LM head (tied), and, in
// a mixture of experts, only the <arch>.expert_used_count chosen experts' matrices of
// each 3-D expert tensor (mul_mat_id reads no other expert's rows): n_used / n_expert of
// its bytes. The router (ffn_gate_inp) is read whole.
uint64_t weight_bytes_per_token(const gguf::Model& file, const model::HParams& hp) {
  uint64_t total = 0, embd = 0;
  bool has_output = false;
  for (const auto& t : file.tensors()) {
    if (hp.n_expert > 0 && t.name.ends_with("_exps.weight")) {
      total += t.n_bytes / hp.n_expert * hp.n_expert_used;  // one expert: n_bytes / n_expert
    } else {
      total += t.n_bytes;
    }
    if (t.name == "token_embd.weight") embd = t.n_bytes;
    if (t.name == "output.weight") has_output = true;
  }
  return has_output ? total - embd : total;
}

}  // namespace

// A llama-bench list: "512", "128,256" (each >= lo).
Result<std::vector<int32_t>> parse_list(const std::string& v, const char* what, int64_t lo) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    MINFER_TRY(const int64_t n,
               parse_int(std::string_view(v).substr(start, comma - start), what, lo, INT32_MAX));
    out.push_back(static_cast<int32_t>(n));
    start = comma + 1;
  }
  return out;
}

int run_bench(const std::vector<std::string>& args) {
  ArgParser p("minfer bench MODEL [flags]");
  std::string model_arg;
  std::vector<int32_t> prompts{512}, gens{128}, threads{0}, parallel{1}, depths{0};
  int32_t reps = 3;
  std::optional<uint32_t> n_ctx_opt;
  std::string format = "md";
  std::vector<std::string> notices;
  auto list = [](std::vector<int32_t>& target, const char* what, int64_t lo) {
    return [&target, what, lo](const std::string& v) -> Status {
      MINFER_TRY(target, parse_list(v, what, lo));
      return Ok{};
    };
  };
  p.string_opt("-m,--model", "PATH", "GGUF path or a file name in the model cache", model_arg);
  p.option("-p,--n-prompt", "N[,N...]", "prompt tokens of the pp tests; 0 skips (512)",
           list(prompts, "-p", 0));
  p.option("-n,--n-gen", "N[,N...]", "generated tokens of the tg tests; 0 skips (128)",
           list(gens, "-n", 0));
  p.option("-d,--n-depth", "N[,N...]",
           "tokens prefilled (untimed) before each rep: the tests run over an N-token KV (0)",
           list(depths, "--n-depth", 0));
  p.option("-t,--threads", "N[,N...]", "CPU threads; 0: every core (0)", list(threads, "-t", 0));
  p.option("-npl,--parallel", "N[,N...]",
           "tg tests decode N sequences per step, one batch (1); t/s counts all of them",
           list(parallel, "--parallel", 1));
  p.int_opt("-r,--repetitions", "N", "measured reps per test (3)", reps, 1, INT32_MAX);
  p.option("-o,--output", "md|csv|json", "output format (md)", [&](const std::string& v) -> Status {
    if (v != "md" && v != "csv" && v != "json") {
      return make_error("bench: -o must be md, csv or json, not '" + v + "'");
    }
    format = v;
    return Ok{};
  });
  p.option("-c,--n-ctx", "N", "context size (default: max pp + max tg + 16)",
           [&](const std::string& v) -> Status {
             MINFER_TRY(const int64_t n, parse_int(v, "--n-ctx", 1, UINT32_MAX));
             n_ctx_opt = static_cast<uint32_t>(n);
             return Ok{};
           });
  KvFlags kv;
  add_kv_flags(p, kv);
  p.optional_value("-fa,--flash-attn", {"0", "1", "on", "off", "auto"},
                   "ignored: the CPU attention is always fused", [&](const std::string&) -> Status {
                     notices.push_back("-fa: ignored; the CPU attention always runs fused");
                     return Ok{};
                   });
  if (auto done = parse_model_command(p, args, "bench", model_arg)) return *done;
  if (auto n = ngl_notice(kv)) notices.push_back(*n);
  for (const std::string& n : notices) fmt::print(stderr, "notice: {}\n", n);

  // Usage errors (--cache-type, --numerics) before the model is looked for.
  auto kv_types = engine_options(0, kv);
  if (!kv_types) return fail(kv_types.error().message);
  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  const int32_t max_p = *std::max_element(prompts.begin(), prompts.end());
  const int32_t max_n = *std::max_element(gens.begin(), gens.end());
  const int32_t max_d = *std::max_element(depths.begin(), depths.end());
  const int32_t max_npl = *std::max_element(parallel.begin(), parallel.end());
  if (max_d > 0 && max_npl > 1) {
    return fail("bench: --n-depth and --parallel above 1 do not combine");
  }
  std::vector<BenchResult> results;
  std::unique_ptr<engine::Engine> last_engine;
  for (const int32_t t : threads) {
    auto options = engine_options(t > 0 ? resolve_threads(t) : 0, kv);
    if (!options) return fail(options.error().message);
    auto eng = open_engine(*path, *options);
    if (!eng) return fail(eng.error().message);
    engine::Engine& e = **eng;
    if (Status st = require_generative(e, "bench"); !st.ok()) return fail(st.error().message);
    // Every test must fit the context: a pp or tg longer than it is a usage error, not
    // a silently shorter test.
    const uint32_t model_ctx = e.hparams().n_ctx_train;
    const uint64_t want =
        n_ctx_opt ? *n_ctx_opt : static_cast<uint64_t>(max_d) + max_p + max_n + 16;
    const uint32_t ctx = static_cast<uint32_t>(std::min<uint64_t>(want, model_ctx));
    if (n_ctx_opt && *n_ctx_opt > model_ctx) {
      return fail(
          fmt::format("bench: --n-ctx {} is beyond the model's context {}", *n_ctx_opt, model_ctx));
    }
    if (static_cast<uint64_t>(max_d) + std::max(max_p, max_n) > ctx) {
      return fail(fmt::format("bench: -d {} + -p {} / -n {} do not fit the context ({}{})", max_d,
                              max_p, max_n, ctx, n_ctx_opt ? "" : ", the model's context length"));
    }
    if (auto st = e.set_n_ctx(ctx); !st.ok()) return fail(st.error().message);
    const uint32_t n_vocab = e.hparams().n_vocab;
    auto synth = [&](int64_t i) {
      return static_cast<engine::TokenId>((i * 7919 + 13) % static_cast<int64_t>(n_vocab));
    };
    std::vector<engine::TokenId> toks;
    engine::Batch prompt_batch;
    // An empty KV, then (untimed) `depth` synthetic tokens at positions 0..depth−1.
    std::vector<engine::TokenId> depth_toks;
    auto start_rep = [&](int32_t depth) -> Status {
      e.clear_kv();
      if (depth == 0) return Ok{};
      depth_toks.resize(static_cast<size_t>(depth));
      for (int i = 0; i < depth; ++i) depth_toks[static_cast<size_t>(i)] = synth(i);
      engine::Batch b;
      b.add_run(depth_toks, 0, 0);
      auto out = e.decode(b);
      if (!out) return out.error();
      return Ok{};
    };
    auto test_name = [](std::string base, int32_t depth) {
      return depth > 0 ? fmt::format("{}@d{}", base, depth) : base;
    };
    for (const int32_t n_prompt : prompts) {
      if (n_prompt == 0) continue;
      for (const int32_t depth : depths) {
        toks.resize(static_cast<size_t>(n_prompt));
        for (int i = 0; i < n_prompt; ++i) {
          toks[static_cast<size_t>(i)] = synth(depth + i);
        }
        BenchResult r{.test = test_name(fmt::format("pp{}", n_prompt), depth),
                      .n_prompt = n_prompt,
                      .n_depth = depth,
                      .threads = e.n_threads()};
        for (int rep = -1; rep < reps; ++rep) {  // rep −1: warm-up
          if (Status st = start_rep(depth); !st.ok()) return fail(st.error().message);
          const auto t0 = Clock::now();
          prompt_batch.clear();
          prompt_batch.add_run(toks, 0, depth);
          auto out = e.decode(prompt_batch);
          const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
          if (!out) return fail(out.error().message);
          if (rep >= 0) {
            r.samples.push_back(n_prompt / sec);
            r.samples_ns.push_back(static_cast<uint64_t>(sec * 1e9));
          }
        }
        summarize(r);
        results.push_back(std::move(r));
      }
    }
    for (const int32_t npl : parallel) {
      if (npl > 1) {
        // N sequences in one arena, each reserving its n_gen cells (one window run).
        const auto n_cells = static_cast<uint64_t>(npl) * static_cast<uint64_t>(max_n);
        if (static_cast<uint32_t>(npl) > kv::kMaxSeqs || n_cells > UINT32_MAX) {
          return fail(
              fmt::format("bench: --parallel {} is beyond {} sequences", npl, kv::kMaxSeqs));
        }
        const engine::ContextOptions co{.n_cells = static_cast<uint32_t>(n_cells),
                                        .n_seq_max = static_cast<uint32_t>(npl),
                                        .n_ctx_seq = static_cast<uint32_t>(max_n)};
        if (auto st = e.set_context(co); !st.ok()) return fail(st.error().message);
      }
      for (const int32_t n_gen : gens) {
        if (n_gen == 0) continue;
        for (const int32_t depth : depths) {
          BenchResult r{.test = npl > 1 ? fmt::format("tg{}x{}", n_gen, npl)
                                        : test_name(fmt::format("tg{}", n_gen), depth),
                        .n_gen = n_gen,
                        .n_depth = depth,
                        .threads = e.n_threads(),
                        .n_parallel = npl};
          engine::Batch batch(static_cast<size_t>(npl));
          std::vector<engine::TokenId> next(static_cast<size_t>(npl));
          for (int rep = -1; rep < reps; ++rep) {
            if (Status st = start_rep(depth); !st.ok()) return fail(st.error().message);
            const uint64_t c0 = process_cpu_ns();
            const auto t0 = Clock::now();
            if (npl == 1) {
              engine::TokenId tok = synth(depth);
              for (int i = 0; i < n_gen; ++i) {
                batch.clear();
                batch.add(tok, 0, depth + i, true);
                auto out = e.decode(batch);
                if (!out) return fail(out.error().message);
                // Greedy argmax: the tg rate includes sampling, as a generation would.
                const std::span<const float> lg = out->row(0);
                tok = static_cast<engine::TokenId>(std::max_element(lg.begin(), lg.end()) -
                                                   lg.begin());
              }
            } else {
              for (int32_t s = 0; s < npl; ++s) {
                auto range = e.kv_cells()->reserve(s, static_cast<uint32_t>(n_gen));
                if (!range) return fail(range.error().message);
                next[static_cast<size_t>(s)] = synth(s);  // a different first token each
              }
              for (int i = 0; i < n_gen; ++i) {
                batch.clear();
                for (int32_t s = 0; s < npl; ++s)
                  batch.add(next[static_cast<size_t>(s)], s, i, true);
                auto out = e.decode(batch);
                if (!out) return fail(out.error().message);
                for (int32_t s = 0; s < npl; ++s) {
                  const std::span<const float> lg = out->row(static_cast<size_t>(s));
                  next[static_cast<size_t>(s)] = static_cast<engine::TokenId>(
                      std::max_element(lg.begin(), lg.end()) - lg.begin());
                }
              }
              for (int32_t s = 0; s < npl; ++s) e.kv_cells()->release(s);
            }
            const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
            const uint64_t cpu = process_cpu_ns() - c0;
            if (rep >= 0) {
              r.samples.push_back(static_cast<double>(n_gen) * npl / sec);
              r.samples_ns.push_back(static_cast<uint64_t>(sec * 1e9));
              r.cpu_ns.push_back(cpu);
            }
          }
          summarize(r);
          // Weight bytes per step are those of one token: the step reads them once.
          r.gbps = static_cast<double>(weight_bytes_per_token(e.file(), e.hparams())) * r.mean /
                   npl / 1e9;
          results.push_back(std::move(r));
        }
      }
    }
    last_engine = std::move(*eng);
  }
  engine::Engine& e = *last_engine;

  uint64_t size = 0, params = 0;
  for (const auto& t : e.file().tensors()) {
    size += t.n_bytes;
    params += t.n_elements;
  }
  std::string name = *path;
  if (auto slash = name.find_last_of('/'); slash != std::string::npos)
    name = name.substr(slash + 1);
  const std::string backend = "CPU";
  std::string out;
  if (format == "json") {
    // minfer's fields, then llama-bench's (its JSON output's names and units), so
    // scripts written for either read it.
    char when[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    auto arr = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      nlohmann::ordered_json j{
          {"model", name},      {"size", size},          {"params", params},
          {"backend", backend}, {"threads", r.threads},  {"test", r.test},
          {"ts_mean", r.mean},  {"ts_stddev", r.stddev}, {"samples_ts", r.samples}};
      if (r.gbps > 0) {
        j["weight_gbps"] = r.gbps;
        j["weight_bytes_per_token"] = weight_bytes_per_token(e.file(), e.hparams());
      }
      if (r.n_gen > 0) j["n_parallel"] = r.n_parallel;
      if (!r.cpu_ns.empty()) {
        // Process CPU time (every thread) per generated token: machine load from other
        // processes does not enter it, unlike t/s.
        const double cpu = mean_stddev(r.cpu_ns).first;
        j["cpu_ms_per_token"] = cpu / 1e6 / (static_cast<double>(r.n_gen) * r.n_parallel);
      }
      j["build_commit"] = MINFER_GIT_COMMIT;
      j["model_filename"] = *path;
      j["model_type"] = model::describe(e.hparams());
      j["model_size"] = size;
      j["model_n_params"] = params;
      j["backends"] = backend;
      j["n_threads"] = r.threads;
      j["type_k"] = std::string(graph::kv_format_name(kv_types->kv_format.k));
      j["type_v"] = std::string(graph::kv_format_name(kv_types->kv_format.v));
      j["n_gpu_layers"] = kv.n_gpu_layers;
      j["n_prompt"] = r.n_prompt;
      j["n_gen"] = r.n_gen;
      j["n_depth"] = r.n_depth;
      j["test_time"] = when;
      j["avg_ns"] = static_cast<uint64_t>(r.mean_ns);
      j["stddev_ns"] = static_cast<uint64_t>(r.stddev_ns);
      j["avg_ts"] = r.mean;
      j["stddev_ts"] = r.stddev;
      j["samples_ns"] = r.samples_ns;
      arr.push_back(std::move(j));
    }
    out = arr.dump(2) + "\n";
  } else if (format == "csv") {
    out =
        "\"model\",\"size\",\"params\",\"backend\",\"threads\",\"test\",\"ts_mean\",\"ts_stddev\","
        "\"weight_gbps\"\n";
    for (const auto& r : results) {
      out += fmt::format(
          "\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{:.6f}\",\"{:.6f}\",\"{:.3f}\"\n", name,
          size, params, backend, r.threads, r.test, r.mean, r.stddev, r.gbps);
    }
  } else {
    out =
        "| model | size | params | backend | threads | test | t/s | weights GB/s |\n"
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n";
    for (const auto& r : results) {
      out += fmt::format("| {} | {:.2f} GiB | {:.2f} B | {} | {} | {} | {:.2f} ± {:.2f} | {} |\n",
                         name, static_cast<double>(size) / (1024.0 * 1024.0 * 1024.0),
                         static_cast<double>(params) / 1e9, backend, r.threads, r.test, r.mean,
                         r.stddev, r.gbps > 0 ? fmt::format("{:.1f}", r.gbps) : "");
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace minfer::cli
