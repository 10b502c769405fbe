// Stage 18 (CLI): the engine flags every model-running subcommand shares, and the one
// place a command opens its engine.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "core/result.h"
#include "engine/engine.h"

namespace minfer::cli {

struct KvFlags {
  std::string cache_type;    // --cache-type: K and V (empty: MINFER_CACHE_TYPE, else f32)
  std::string cache_type_k;  // -ctk / --cache-type-k: K alone, over --cache-type
  std::string cache_type_v;  // -ctv / --cache-type-v: V alone, over --cache-type
  std::string numerics;      // --numerics (empty: MINFER_NUMERICS, else default)
  std::string device;        // --device / -dev: NAME[,NAME...] (empty or none: the CPU)
  int32_t n_gpu_layers = 0;  // -ngl: the last N layers on the first device (N > n_layer: + head)
  bool ngl_given = false;
};

// The notice for -ngl with no device besides the CPU named (every layer stays on the CPU);
// nullopt when -ngl was not given, is 0, or a device takes the layers.
std::optional<std::string> ngl_notice(const KvFlags& flags);

// Registers --cache-type, -ctk, -ctv, --numerics, --device and -ngl.
void add_kv_flags(ArgParser& p, KvFlags& flags);

// llama.cpp's engine flags this build has no use for, accepted with a notice each (added
// to `notices`, printed once before the model loads): -fa [on|off|auto],
// --no-mmap; and --mlock (sets `mlock`: lock_memory() once the model is open).
void add_compat_flags(ArgParser& p, std::vector<std::string>& notices, bool& mlock);

// --reasoning-format (none | deepseek | auto: `split`) and --reasoning-budget N (-1 no
// limit, 0 no thinking: `budget`), with each command's own words for where the block goes.
void add_reasoning_flags(ArgParser& p, bool& split, int32_t& budget, const std::string& format_help,
                         const std::string& budget_help);

// --mlock: mlockall(MCL_CURRENT) over the mapped model; a refusal is a warning on
// stderr (the model stays pageable), never an error.
void lock_memory();

// The engine options of a model-running command: its thread count, the traces from
// Config, and the flags resolved (a flag wins over its MINFER_* variable);
// `--numerics llamacpp` implies the f16 cache for K or V unless a type is given for it. An unknown
// value is an Error naming it and where it came from.
Result<engine::EngineOptions> engine_options(int32_t n_threads, const KvFlags& flags);

// Engine::open for a command: the model path must be a regular file (a FIFO would
// block in open), and a failure to start the worker threads (std::system_error from
// the pool) is an Error naming the thread count, not an abort.
Result<std::unique_ptr<engine::Engine>> open_engine(const std::string& path,
                                                    const engine::EngineOptions& options);

// Commands that generate or score text refuse an embedding model (an encoder returns
// hidden states, not logits) with an error that names what does run it.
Status require_generative(const engine::Context& e, const std::string& command);

}  // namespace minfer::cli
