// Stage 18 (CLI): the engine flags every model-running subcommand shares.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/result.h"
#include "engine/engine.h"

namespace minfer::cli {

struct KvFlags {
  std::string cache_type;  // --cache-type (empty: MINFER_CACHE_TYPE, else f32)
  std::string numerics;    // --numerics (empty: MINFER_NUMERICS, else default)
};

// Registers --cache-type and --numerics on `app`.
void add_kv_flags(CLI::App& app, KvFlags& flags);

// The engine options of a model-running command: its thread count, the traces from
// Config, and the flags resolved (a flag wins over its MINFER_* variable);
// `--numerics llamacpp` implies the f16 cache unless a cache type is given. An unknown
// value is an Error naming it and where it came from.
Result<engine::EngineOptions> engine_options(int32_t n_threads, const KvFlags& flags);

}  // namespace minfer::cli
