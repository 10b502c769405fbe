// Stage 18 (CLI): `minfer serve MODEL [flags]` — flags only; the server lives in
// src/server (docs/USAGE.md "Server").
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine_flags.h"
#include "files.h"
#include "model_path.h"
#include "run_flags.h"
#include "server/server.h"

namespace minfer::cli {

int run_serve(const std::vector<std::string>& args) {
  ArgParser p("minfer serve MODEL [flags]");
  std::string model_arg;
  server::ServerOptions o;
  int32_t n_threads = 0, slots = 4, n_ctx = 0, ctx_total = 0, port = o.port, max_queue = 64,
          step = 512;
  int32_t drain_ms = o.drain_ms;
  p.string_opt("-m,--model", "PATH", "GGUF path or a file name in the model cache", model_arg);
  p.string_opt("--host", "ADDR", "address to bind (127.0.0.1: loopback only)", o.host);
  p.int_opt("--port", "N", "TCP port; 0 picks a free one, printed at startup (8080)", port, 0,
            65535);
  p.int_opt("--slots,--n-slots,-np,--parallel", "N",
            "requests decoded together, one KV sequence each (4)", slots, 1, kv::kMaxSeqs);
  p.int_opt("--n-ctx", "N",
            "positions one request may use, prompt + completion; the KV arena holds "
            "slots x N cells (2048; an embedding model: its context_length)",
            n_ctx, 2, INT32_MAX);
  p.int_opt("-c,--ctx-size", "N",
            "llama-server's meaning: the KV arena's cells in all, split evenly across the "
            "slots (a request may use N / slots positions); instead of --n-ctx",
            ctx_total, 2, INT32_MAX);
  p.string_opt("--api-key", "KEY", "require 'Authorization: Bearer KEY' (all but /health)",
               o.api_key);
  p.string_opt("--cors-origin", "ORIGIN",
               "Access-Control-Allow-Origin: '*' or the one origin (scheme://host[:port]) "
               "answered (*)",
               o.cors_origin);
  p.int_opt("-t,--threads", "N", "CPU threads; 0: every core (0)", n_threads, 0, 4096);
  p.int_opt("--max-queue", "N", "requests that may wait for a slot; more get 429 (64)", max_queue,
            0, 1 << 20);
  p.int_opt("-b,--batch-size", "N", "rows per forward step: decode rows + prefill chunks (512)",
            step, 16, 1 << 16);
  int32_t max_body = static_cast<int32_t>(o.max_body_bytes);
  p.int_opt("--max-body", "BYTES",
            "largest request body; a larger one is refused with 413 as it arrives (8388608)",
            max_body, 1024, INT32_MAX);
  int32_t max_connections = static_cast<int32_t>(o.max_connections);
  p.int_opt("--max-connections", "N",
            "connections open at once; past it a request is answered 503 (Retry-After) and "
            "its connection closed (1024)",
            max_connections, 1, 65536);
  int32_t responses_max = static_cast<int32_t>(o.responses_max);
  p.int_opt("--responses-max", "N",
            "finished /v1/responses responses kept in memory for retrieval and "
            "previous_response_id; the oldest is evicted; 0 keeps none (1000)",
            responses_max, 0, 1 << 24);
  bool embeddings = false;
  std::string pooling = "model";
  p.flag("--embeddings,--embedding",
         "serve embeddings (llama-server's flag; an embedding model serves them anyway)",
         [&] { embeddings = true; });
  bool reranking = false;
  p.flag("--reranking,--rerank",
         "serve /v1/rerank (llama-server's flag; a cross-encoder serves it anyway, and only a\n"
         "cross-encoder can)",
         [&] { reranking = true; });
  p.string_opt("--pooling", "P",
               "pooling of the embedding routes: none | mean | cls | last (the model's)", pooling);
  int32_t timeout = o.timeout_s, keep_alive_timeout = o.keep_alive_timeout_s;
  p.int_opt("-to,--timeout", "SECONDS",
            "a request's head, then its body, and a response's write must each take less; "
            "past it the connection closes (5; llama-server's: 600)",
            timeout, 1, 1 << 24);
  p.int_opt("--keep-alive-timeout", "SECONDS",
            "a connection with no request begun is closed after this long (5)", keep_alive_timeout,
            1, 1 << 24);
  int32_t stream_timeout = o.stream_timeout_s;
  p.int_opt("--stream-timeout", "SECONDS",
            "a stream whose client takes no bytes for this long is cancelled and closed (600)",
            stream_timeout, 1, 1 << 24);
  p.int_opt("--drain-ms", "N", "after SIGINT/SIGTERM, how long requests may finish (30000)",
            drain_ms, 0, INT32_MAX);
  p.string_opt("--alias", "NAME", "model id of /v1/models and responses (the file name)",
               o.model_id);
  p.string_opt("--slot-save-path", "DIR",
               "folder of POST /slots/{id}?action=save|restore files (created if missing; "
               "off by default)",
               o.slot_save_path);
  std::vector<std::string> served_names;
  p.option(
      "--served-model-name", "NAME[,ALIAS...]",
      "vLLM's: the first name is the model id, the others are names a request's model may "
      "give too (repeatable)",
      [&served_names](const std::string& v) -> Status {
        size_t pos = 0;
        while (pos <= v.size()) {
          const size_t end = std::min(v.find(',', pos), v.size());
          if (end == pos) return make_error("--served-model-name: an empty name in '" + v + "'");
          served_names.push_back(v.substr(pos, end - pos));
          pos = end + 1;
        }
        return Ok{};
      },
      /*repeatable=*/true);
  std::string template_file;
  p.string_opt("--chat-template-file", "PATH",
               "Jinja chat template file instead of the model's (its tool-call format too)",
               template_file);
  add_reasoning_flags(p, o.reasoning_split, o.reasoning_budget,
                      "a thinking template's <think> block: deepseek (default) returns it as\n"
                      "reasoning_content apart from content; none leaves it in the content",
                      "reasoning tokens at most, then the server closes the block (-1: no limit; "
                      "0: no\nthinking)");
  p.flag("--jinja", "accepted for llama.cpp compatibility: templates are always Jinja", [] {});
  std::string api_key_file;
  p.string_opt("--api-key-file", "PATH", "read the API key from the first line of this file",
               api_key_file);
  server::KvEventsOptions& kve = o.scheduler.kv_events;
  int32_t kv_block_size = static_cast<int32_t>(kve.block_size);
  p.string_opt("--kv-events", "ENDPOINT",
               "publish the slots' cached blocks as vLLM KV events (BlockStored, BlockRemoved,\n"
               "AllBlocksCleared) on a ZMQ PUB socket; bound when ENDPOINT has '*' or '::' or is\n"
               "ipc:// or inproc://, connected otherwise, as vLLM (off)",
               kve.endpoint);
  p.string_opt("--kv-events-replay", "ENDPOINT",
               "ZMQ ROUTER socket (bound) answering replay requests with the last 10000 event "
               "batches (none)",
               kve.replay_endpoint);
  p.string_opt("--kv-events-topic", "TOPIC", "first frame of every KV event message (empty)",
               kve.topic);
  p.int_opt("--kv-block-size", "N",
            "tokens per block of --kv-events; a block's hash is XXH3-64 (seed 0x6d696e666572)\n"
            "of its parent's hash (u64 LE, 0 for the first) and its token ids (u32 LE) (16)",
            kv_block_size, 1, 1 << 16);
  p.flag("--metrics", "accepted for llama.cpp compatibility: /metrics is always served", [] {});
  KvFlags kv;
  add_kv_flags(p, kv);
  p.section(
      "speculative decoding (the default of every request; speculative.n_max etc. per request)");
  std::string model_draft;
  int32_t threads_draft = 0;
  add_spec_flags(p, o.scheduler.spec, model_draft, threads_draft);
  p.section("accepted for llama.cpp compatibility");
  std::vector<std::string> notices;
  bool mlock = false;
  add_compat_flags(p, notices, mlock);
  if (auto done = parse_model_command(p, args, "serve", model_arg)) return *done;
  if (!api_key_file.empty()) {
    if (!o.api_key.empty()) return fail("give --api-key or --api-key-file, not both");
    auto text = read_input_file(api_key_file);
    if (!text) return fail(text.error().message);
    std::string key = text->substr(0, text->find('\n'));
    if (!key.empty() && key.back() == '\r') key.pop_back();
    if (key.empty()) return fail("--api-key-file '" + api_key_file + "': the first line is empty");
    o.api_key = std::move(key);
  }
  if (auto n = ngl_notice(kv)) notices.push_back(*n);
  for (const std::string& n : notices) std::fprintf(stderr, "notice: %s\n", n.c_str());
  if (!template_file.empty()) {
    auto text = read_input_file(template_file);
    if (!text) return fail(text.error().message);
    if (text->empty()) return fail("--chat-template-file '" + template_file + "' is empty");
    o.chat_template = std::move(*text);
  }
  if (!o.slot_save_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.slot_save_path, ec);
    if (ec || !std::filesystem::is_directory(o.slot_save_path)) {
      return fail("--slot-save-path '" + o.slot_save_path + "' is not a folder that can be made" +
                  (ec ? ": " + ec.message() : ""));
    }
  }
  if (!served_names.empty()) {
    if (!o.model_id.empty()) return fail("give --alias or --served-model-name, not both");
    o.model_id = served_names.front();
    o.model_aliases.assign(served_names.begin() + 1, served_names.end());
  }
  o.port = port;
  o.drain_ms = drain_ms;
  o.stream_timeout_s = stream_timeout;
  o.timeout_s = timeout;
  o.keep_alive_timeout_s = keep_alive_timeout;
  o.max_body_bytes = static_cast<size_t>(max_body);
  o.max_connections = static_cast<size_t>(max_connections);
  o.responses_max = static_cast<size_t>(responses_max);
  o.scheduler.n_slots = static_cast<uint32_t>(slots);
  if (ctx_total > 0) {
    if (n_ctx > 0) {
      return fail("serve: give -c/--ctx-size (all slots) or --n-ctx (per request), not both");
    }
    if (ctx_total / slots < 2) {
      return fail("serve: -c " + std::to_string(ctx_total) + " split across " +
                  std::to_string(slots) + " slots leaves " + std::to_string(ctx_total / slots) +
                  " positions per request; give at least " + std::to_string(2 * slots));
    }
    n_ctx = ctx_total / slots;
  }
  if (pooling != "model") {
    auto pp = engine::parse_pooling(pooling);
    if (!pp) return fail("serve: --pooling: " + pp.error().message);
    o.pooling = *pp;
  }
  o.scheduler.max_queue = static_cast<uint32_t>(max_queue);
  kve.block_size = static_cast<uint32_t>(kv_block_size);
  if (kve.endpoint.empty() && (!kve.replay_endpoint.empty() || !kve.topic.empty())) {
    return fail("--kv-events-replay and --kv-events-topic need --kv-events ENDPOINT");
  }
  o.scheduler.step_tokens = static_cast<uint32_t>(step);
  if (auto st = check_spec_flags(o.scheduler.spec, model_draft, threads_draft); !st.ok()) {
    return fail("serve: " + st.error().message);
  }

  // Before the engine starts its worker threads: they must not take SIGINT/SIGTERM.
  server::block_shutdown_signals();
  // Usage errors (--cache-type, --numerics) before the model is looked for.
  auto options = engine_options(n_threads, kv);
  if (!options) return fail(options.error().message);
  if ((o.scheduler.spec.ngram > 0 || !model_draft.empty()) &&
      engine::llamacpp_family(options->numerics)) {
    std::fprintf(stderr,
                 "notice: speculative decoding under --numerics llamacpp*: llama.cpp's arithmetic "
                 "makes a row depend on its batch in places, so the output may differ from the "
                 "run without it (as llama.cpp's does)\n");
  }
  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  std::string draft_path;
  if (!model_draft.empty()) {
    auto dp = resolve_model_path(model_draft);
    if (!dp) return fail("draft model: " + dp.error().message);
    draft_path = *dp;
  }
  // Loaded once the server listens (it answers 503 "loading model" meanwhile).
  std::unique_ptr<engine::Engine> eng;
  std::unique_ptr<engine::Engine> draft;
  auto load = [&](server::ServerOptions& so) -> Result<engine::Context*> {
    auto opened = engine::Engine::open(*path, *options);
    if (!opened) return opened.error();
    eng = std::move(*opened);
    if (mlock) lock_memory();
    const uint32_t n_ctx_train = eng->hparams().n_ctx_train;
    const bool encoder = eng->hparams().embeddings_out;
    if (embeddings && !encoder) {
      return make_error(
          "serve: --embeddings needs an embedding model (an encoder such as bert); '" + model_arg +
          "' is a generative model (" + eng->hparams().arch + ")");
    }
    if (reranking && eng->hparams().n_cls_out == 0) {
      return make_error(
          "serve: --reranking needs a cross-encoder (a model with a classification head); '" +
          model_arg + "' has none");
    }
    so.scheduler.n_ctx = n_ctx > 0 ? static_cast<uint32_t>(n_ctx)
                                   : (encoder && n_ctx_train > 0 ? n_ctx_train : 2048U);
    if (n_ctx_train > 0 && so.scheduler.n_ctx > n_ctx_train) {
      return make_error((ctx_total > 0
                             ? "serve: -c " + std::to_string(ctx_total) + " over " +
                                   std::to_string(slots) + " slots gives " +
                                   std::to_string(so.scheduler.n_ctx) + " positions per request, "
                             : "serve: --n-ctx " + std::to_string(so.scheduler.n_ctx) + " is ") +
                        "past the model's context length " + std::to_string(n_ctx_train));
    }
    if (!draft_path.empty()) {
      // -md: the draft model, with the server's engine flags; start() sizes its KV.
      if (encoder) return make_error("serve: -md needs a generative model to draft for");
      engine::EngineOptions draft_options = *options;
      if (threads_draft != 0) draft_options.n_threads = resolve_threads(threads_draft);
      auto d = engine::Engine::open(draft_path, draft_options);
      if (!d) return d.error().context("draft model");
      draft = std::move(*d);
      if (draft->hparams().embeddings_out || !draft->has_tokenizer()) {
        return make_error("draft model: '" + model_draft + "' is not a generative model");
      }
      MINFER_TRY_STATUS(engine::check_draft_vocab(eng->tokenizer(), draft->tokenizer()));
      so.scheduler.spec.draft = draft.get();
    }
    if (so.model_id.empty()) so.model_id = std::filesystem::path(*path).filename().string();
    so.model_path = *path;
    return static_cast<engine::Context*>(eng.get());
  };
  o.version = MINFER_VERSION;
  if (auto st = server::serve(o, load); !st.ok()) return fail(st.error().message);
  return 0;
}

}  // namespace minfer::cli
