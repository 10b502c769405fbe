// Stage 18 (CLI): `minfer viz MODEL [--port 8081] [-p PROMPT]` — the engine view for a
// local single-user run: the server with one slot, GET / serving the view (graph, live
// panel, a prompt box that runs generations on this process). docs/USAGE.md "Engine view".
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine_flags.h"
#include "model_path.h"
#include "server/server.h"

namespace minfer::cli {

int run_viz(const std::vector<std::string>& args) {
  ArgParser p("minfer viz MODEL [flags]");
  std::string model_arg;
  server::ServerOptions o;
  o.viz_home = true;
  int32_t n_threads = 0, n_ctx = 0, port = 8081;
  p.string_opt("-m,--model", "PATH", "GGUF path or a file name in the model cache", model_arg);
  p.string_opt("--host", "ADDR", "address to bind (127.0.0.1: loopback only)", o.host);
  p.int_opt("--port", "N", "TCP port of the view; 0 picks a free one, printed at startup (8081)",
            port, 0, 65535);
  p.int_opt("-c,--n-ctx,--ctx-size", "N",
            "positions a run may use, prompt + reply (4096, or the model's context if smaller)",
            n_ctx, 0, INT32_MAX);
  p.int_opt("-t,--threads", "N", "CPU threads; 0: every core (0)", n_threads, 0, 4096);
  p.string_opt("-p,--prompt", "TEXT", "the prompt box's text; the view runs it once when opened",
               o.viz_prompt);
  KvFlags kv;
  add_kv_flags(p, kv);
  if (auto done = parse_model_command(p, args, "viz", model_arg)) return *done;
  if (auto n = ngl_notice(kv)) fmt::print(stderr, "notice: {}\n", *n);
  o.port = port;
  o.scheduler.n_slots = 1;  // one user: every run decodes alone
  o.scheduler.max_queue = 4;
  o.drain_ms = 2000;

  server::block_shutdown_signals();
  // Usage errors (--cache-type, --numerics) before the model is looked for.
  auto options = engine_options(n_threads, kv);
  if (!options) return fail(options.error().message);
  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  auto eng = engine::Engine::open(*path, *options);
  if (!eng) return fail(eng.error().message);
  if (Status st = require_generative(**eng, "viz"); !st.ok()) return fail(st.error().message);
  const uint32_t n_ctx_train = (*eng)->hparams().n_ctx_train;
  if (n_ctx == 0) {
    o.scheduler.n_ctx = n_ctx_train > 0 ? std::min<uint32_t>(4096, n_ctx_train) : 4096;
  } else if (n_ctx == 1 || (n_ctx_train > 0 && static_cast<uint32_t>(n_ctx) > n_ctx_train)) {
    return fail("viz: --n-ctx " + std::to_string(n_ctx) + " is outside [2, " +
                std::to_string(n_ctx_train) + "] (the model's context length)");
  } else {
    o.scheduler.n_ctx = static_cast<uint32_t>(n_ctx);
  }
  o.model_id = std::filesystem::path(*path).filename().string();
  std::fprintf(stderr, "minfer viz: the engine view of %s; open the address below (Ctrl-C ends)\n",
               o.model_id.c_str());
  if (auto st = server::serve(**eng, o); !st.ok()) return fail(st.error().message);
  return 0;
}

}  // namespace minfer::cli
