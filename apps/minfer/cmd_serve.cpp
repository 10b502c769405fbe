// Stage 18 (CLI): `minfer serve MODEL [flags]` — flags only; the server lives in
// src/server (docs/USAGE.md "Server").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "engine_flags.h"
#include "model_path.h"
#include "server/server.h"

namespace minfer::cli {

int run_serve(const std::vector<std::string>& args) {
  CLI::App app{"minfer serve: OpenAI-compatible HTTP server", "minfer serve"};
  std::string model_arg;
  server::ServerOptions o;
  int n_threads = 0;
  uint32_t slots = 4, n_ctx = 2048;
  app.add_option("model", model_arg, "GGUF path or a file name in the model cache");
  app.add_option("--host", o.host, "address to bind (loopback by default)")->capture_default_str();
  app.add_option("--port", o.port, "TCP port (0: any free port, printed at startup)")
      ->capture_default_str();
  app.add_option("--slots,--n-slots,--parallel", slots,
                 "requests decoded together (one KV sequence each); also -np")
      ->capture_default_str();
  app.add_option("-c,--n-ctx", n_ctx, "positions one request may use (prompt + completion); "
                                      "the KV arena holds slots x n-ctx cells")
      ->capture_default_str();
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY'");
  app.add_option("-t,--threads", n_threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("--max-queue", o.scheduler.max_queue,
                 "requests that may wait for a slot; more get 429")
      ->capture_default_str();
  app.add_option("-b,--batch-size", o.scheduler.step_tokens,
                 "tokens per forward step (decode rows + prefill chunks)")
      ->capture_default_str();
  app.add_option("--drain-ms", o.drain_ms,
                 "after SIGINT/SIGTERM, how long in-flight requests may finish")
      ->capture_default_str();
  app.add_option("--alias", o.model_id, "model id reported by /v1/models (default: file name)");
  KvFlags kv;
  add_kv_flags(app, kv);
  try {
    std::vector<std::string> rev(args.rbegin(), args.rend());
    // llama-server's -np: CLI11 takes one-letter short names only.
    for (std::string& a : rev) {
      if (a == "-np") a = "--parallel";
    }
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (slots < 1 || slots > kv::kMaxSeqs) {
    return fail("serve: --slots must be in [1, " + std::to_string(kv::kMaxSeqs) + "]");
  }
  if (n_ctx < 2) return fail("serve: --n-ctx must be >= 2");
  if (o.scheduler.step_tokens < 16) return fail("serve: --batch-size must be >= 16");
  if (o.port < 0 || o.port > 65535) return fail("serve: --port must be in [0, 65535]");
  if (o.drain_ms < 0) return fail("serve: --drain-ms must be >= 0");

  // Before the engine starts its worker threads: they must not take SIGINT/SIGTERM.
  server::block_shutdown_signals();
  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  auto options = engine_options(n_threads, kv);
  if (!options) return fail(options.error().message);
  auto eng = engine::Engine::open(*path, *options);
  if (!eng) return fail(eng.error().message);
  if (n_ctx > (*eng)->hparams().n_ctx_train && (*eng)->hparams().n_ctx_train > 0) {
    return fail("serve: --n-ctx " + std::to_string(n_ctx) + " is past the model's context length " +
                std::to_string((*eng)->hparams().n_ctx_train));
  }
  o.scheduler.n_slots = slots;
  o.scheduler.n_ctx = n_ctx;
  if (o.model_id.empty()) o.model_id = std::filesystem::path(*path).filename().string();
  if (auto st = server::serve(**eng, o); !st.ok()) return fail(st.error().message);
  return 0;
}

}  // namespace minfer::cli
