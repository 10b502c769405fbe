// Stage 18 (CLI): `minfer bench MODEL` — llama-bench shaped throughput: pp<N> (one
// forward of N prompt tokens) and tg<N> (N single-token forwards with greedy argmax
// sampling), mean ± stddev over reps, plus the weight bandwidth a tg rate implies.
// Benchmarks are not tests (ARCHITECTURE §5): nothing here asserts a speed.
// Method (docs/PERFORMANCE.md): synthetic ids (i·7919 + 13) mod n_vocab; one untimed
// warm-up rep per test; every rep restarts at position 0 in the same graph cache
// (clear_kv: cells freed, regions untouched — attention reads only positions ≤ pos).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "commands.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

struct BenchResult {
  std::string test;             // "pp512", "tg128"
  std::vector<double> samples;  // tok/s per rep
  double mean = 0.0, stddev = 0.0;
  double gbps = 0.0;  // tg: weight bytes per token × mean tok/s
};

void summarize(BenchResult& r) {
  const double n = static_cast<double>(r.samples.size());
  r.mean = std::accumulate(r.samples.begin(), r.samples.end(), 0.0) / n;
  double ss = 0.0;
  for (double s : r.samples) ss += (s - r.mean) * (s - r.mean);
  r.stddev = r.samples.size() > 1 ? std::sqrt(ss / (n - 1.0)) : 0.0;  // llama-bench: n−1
}

using Clock = std::chrono::steady_clock;

// Bytes of weights one decoded token reads: every matrix once, except the token
// embedding table (one row per token) unless it doubles as the LM head (tied).
uint64_t weight_bytes_per_token(const gguf::Model& file) {
  uint64_t total = 0, embd = 0;
  bool has_output = false;
  for (const auto& t : file.tensors()) {
    total += t.n_bytes;
    if (t.name == "token_embd.weight") embd = t.n_bytes;
    if (t.name == "output.weight") has_output = true;
  }
  return has_output ? total - embd : total;
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  CLI::App app{"minfer bench: prefill (pp) and decode (tg) throughput, llama-bench style",
               "minfer bench"};
  std::string model_arg;
  int n_prompt = 512, n_gen = 128, reps = 3, n_threads = 0;
  uint32_t n_ctx = 0;
  std::string format = "md";
  app.add_option("model", model_arg, "GGUF path or a file name in the model cache");
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens of the pp test (0: skip)")
      ->capture_default_str();
  app.add_option("-n,--n-gen", n_gen, "generated tokens of the tg test (0: skip)")
      ->capture_default_str();
  app.add_option("-r,--repetitions", reps, "measured reps per test (>= 1)")->capture_default_str();
  app.add_option("-t,--threads", n_threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("-o,--output", format, "md | csv | json")->capture_default_str();
  app.add_option("--n-ctx", n_ctx, "context size (default: pp + tg + 16)");
  KvFlags kv;
  add_kv_flags(app, kv);
  try {
    std::vector<std::string> rev(args.rbegin(), args.rend());
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (reps < 1) return fail("bench: -r must be >= 1");
  if (n_prompt < 0 || n_gen < 0) return fail("bench: -p and -n must be >= 0");
  if (format != "md" && format != "csv" && format != "json")
    return fail("bench: -o must be md, csv or json");

  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  auto options = engine_options(n_threads, kv);
  if (!options) return fail(options.error().message);
  auto eng = engine::Engine::open(*path, *options);
  if (!eng) return fail(eng.error().message);
  engine::Engine& e = **eng;
  const uint32_t want_ctx = n_ctx ? n_ctx : static_cast<uint32_t>(n_prompt + n_gen + 16);
  const uint32_t ctx = e.context_for(want_ctx, static_cast<uint32_t>(std::max(n_prompt, n_gen)));
  if (auto st = e.set_n_ctx(ctx); !st.ok()) return fail(st.error().message);
  const uint32_t n_vocab = e.hparams().n_vocab;
  auto synth = [&](int64_t i) {
    return static_cast<engine::TokenId>((i * 7919 + 13) % static_cast<int64_t>(n_vocab));
  };

  std::vector<BenchResult> results;
  std::vector<engine::TokenId> toks;
  std::vector<int32_t> pos;
  if (n_prompt > 0) {
    toks.resize(static_cast<size_t>(n_prompt));
    pos.resize(toks.size());
    for (int i = 0; i < n_prompt; ++i) {
      toks[static_cast<size_t>(i)] = synth(i);
      pos[static_cast<size_t>(i)] = i;
    }
    BenchResult r{.test = fmt::format("pp{}", n_prompt)};
    for (int rep = -1; rep < reps; ++rep) {  // rep −1: warm-up
      e.clear_kv();
      const auto t0 = Clock::now();
      auto out = e.forward(toks, pos, 1);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!out) return fail(out.error().message);
      if (rep >= 0) r.samples.push_back(n_prompt / s);
    }
    summarize(r);
    results.push_back(std::move(r));
  }
  if (n_gen > 0) {
    BenchResult r{.test = fmt::format("tg{}", n_gen)};
    for (int rep = -1; rep < reps; ++rep) {
      e.clear_kv();
      engine::TokenId tok = synth(0);
      const auto t0 = Clock::now();
      for (int i = 0; i < n_gen; ++i) {
        const int32_t p = i;
        auto out = e.forward(std::span<const engine::TokenId>(&tok, 1),
                             std::span<const int32_t>(&p, 1), 1);
        if (!out) return fail(out.error().message);
        // Greedy argmax: the tg rate includes sampling, as a generation would.
        const std::span<const float> lg = *out;
        tok = static_cast<engine::TokenId>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep >= 0) r.samples.push_back(n_gen / s);
    }
    summarize(r);
    r.gbps = static_cast<double>(weight_bytes_per_token(e.file())) * r.mean / 1e9;
    results.push_back(std::move(r));
  }

  uint64_t size = 0, params = 0;
  for (const auto& t : e.file().tensors()) {
    size += t.n_bytes;
    params += t.n_elements;
  }
  std::string name = *path;
  if (auto slash = name.find_last_of('/'); slash != std::string::npos)
    name = name.substr(slash + 1);
  const std::string backend = "CPU";
  const int threads = e.n_threads();
  std::string out;
  if (format == "json") {
    auto arr = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json j{{"model", name},      {"size", size},          {"params", params},
                       {"backend", backend}, {"threads", threads},    {"test", r.test},
                       {"ts_mean", r.mean},  {"ts_stddev", r.stddev}, {"samples_ts", r.samples}};
      if (r.gbps > 0) j["weight_gbps"] = r.gbps;
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
          size, params, backend, threads, r.test, r.mean, r.stddev, r.gbps);
    }
  } else {
    out =
        "| model | size | params | backend | threads | test | t/s | weights GB/s |\n"
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n";
    for (const auto& r : results) {
      out += fmt::format("| {} | {:.2f} GiB | {:.2f} B | {} | {} | {} | {:.2f} ± {:.2f} | {} |\n",
                         name, static_cast<double>(size) / (1024.0 * 1024.0 * 1024.0),
                         static_cast<double>(params) / 1e9, backend, threads, r.test, r.mean,
                         r.stddev, r.gbps > 0 ? fmt::format("{:.1f}", r.gbps) : "");
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace minfer::cli
