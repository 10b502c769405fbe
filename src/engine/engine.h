// Stage 15 (the loop): LoadedModel (weights + tokenizer, immutable, shared) and Context
// (one KV arena: cells and regions, the runtime cache, the scheduler) behind the
// decode facade the loops, the server, tests and tools call; Engine is a
// Context that owns its model.
// Invariants: topology depends on GraphParams only; token ids, positions, KV cells and
// windows are filled after the reuse check / allocation (ARCHITECTURE §2.1, §2.7); a
// position >= n_ctx is an Error before anything is placed or run (§2.4); the KV regions
// belong to the cache's allocator and survive every rebuild (§2.3); a reused step
// allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "backend/registry.h"
#include "core/result.h"
#include "engine/batch.h"
#include "engine/text.h"
#include "gguf/gguf.h"
#include "graph/cache.h"
#include "graph/params.h"
#include "kv/cells.h"
#include "model/model.h"
#include "sched/sched.h"
#include "tokenizer/tokenizer.h"

namespace minfer::engine {

// Arithmetic the engine commits to (ARCHITECTURE §6).
//  kDefault:  f32 attention over the KV window, the fastest kernels of the CPU.
//  kLlamaCpp: llama.cpp's CPU arithmetic, reproduced bit for bit on the ops whose
//             order we follow: f16 KV cache, attention as ggml's flash-attention vector
//             path (AttnNumerics::kGgmlF16), mul_mat kernels that accumulate in ggml's
//             AVX2 order (no AVX-512 re-blocking). Needs an AVX2 CPU. Still thread- and
//             batch-independent (invariant 8); slower than kDefault on AVX-512.
//             It follows llama.cpp's default CPU build, whose CPU_REPACK buffer
//             re-lays Q4_0 / Q4_K matmul weights at load and multiplies them in its
//             repack order (backend/cpu/vec_dot.h); where that applies a row depends
//             on its batch as in llama.cpp (Q4_K's 4-row GEMM groups).
//             Its flash attention's f16 V accumulator is updated in f32 arithmetic on
//             widened halves, as every x86 build of llama.cpp without __AVX512FP16__
//             runs it (GGML_NATIVE=OFF builds, the PyPI wheels, a native build on a CPU
//             without AVX512-FP16). A decoded token that sees a cell past 256 takes
//             llama.cpp's split-KV decode, cut by the thread count: there a row
//             depends on n_threads, as llama.cpp's does on -t.
//  kLlamaCppNoRepack: the same with llama.cpp's plain CPU kernels for every weight
//             (its use_extra_bufts=false / GGML_CPU_REPACK=OFF configuration).
//  kLlamaCppAvx512Fp16: kLlamaCpp as llama.cpp's native build on a CPU with AVX512-FP16
//             compiles its flash attention: the f16 helpers in f16 arithmetic over
//             128-element steps (attn_ggml_f16.h); differs from kLlamaCpp from head size
//             128 on.
enum class Numerics : uint8_t { kDefault, kLlamaCpp, kLlamaCppNoRepack, kLlamaCppAvx512Fp16 };
// Either llamacpp mode (the f16 KV cache, ggml's attention and AVX2 orders).
inline bool llamacpp_family(Numerics n) {
  return n != Numerics::kDefault;
}
// "default" / "llamacpp" / "llamacpp-norepack" / "llamacpp-avx512fp16" (--numerics,
// MINFER_NUMERICS); unknown → Error.
Result<Numerics> parse_numerics(std::string_view text);

struct EngineOptions {
  int32_t n_threads = 0;       // CPU worker threads including the caller; 0 = all cores
  bool rebuild_trace = false;  // one stderr line per rebuild (Config::rebuild_trace)
  bool graph_trace = false;    // split layout + census per execute (Config::graph_trace)
  graph::KvFormats kv_format;  // element types of the K and the V cache (f32 both)
  Numerics numerics = Numerics::kDefault;
  // Backends besides the CPU (always there), by registry name in priority order
  // (`--device`); "cpu" names the CPU. Error at create: an unknown or repeated name.
  std::vector<std::string> devices;
  // -ngl N: the last N repeating layers (their weights, uploaded once here, and their KV
  // regions) run on the first device of `devices`; N > the layer count (or N < 0) also
  // places the output head there, as llama.cpp does. Without a device: everything on the
  // CPU (the CLI prints a notice).
  int32_t n_gpu_layers = 0;
};

// Every device a context may name: the CPU first (its kernel set and threads), then
// the registry's (backend/registry.h), as `minfer --list-devices` prints them.
std::vector<backend::DeviceInfo> list_devices(int32_t n_threads = 0);

// The KV arena of a context. One shared cell store (not fixed partitions): any
// sequence may use any free cell; positions of one sequence stay below n_ctx_seq.
struct ContextOptions {
  uint32_t n_cells = 0;    // cells of the arena (the regions' extent)
  uint32_t n_seq_max = 1;  // sequences that may coexist (1..kv::kMaxSeqs)
  uint32_t n_ctx_seq = 0;  // positions one sequence may use (0: n_cells); <= the model's
                           // context_length
  int32_t n_runs = 1;      // window runs each query may need at least (prefix sharing and
                           // fragmented cells need more; decode raises it on demand)
  // Rows padded to bucket_rows (decode): mixed batches of 3 or 5 rows reuse the graph of
  // 4 or 8. Off: the graph takes the batch's own row counts — a single sequence's shapes
  // (its prefill chunk, its one-token step) repeat anyway, and padding rows would be
  // computed for nothing (set_n_ctx, the CLI and the chat).
  bool pad_rows = true;
};

struct EngineStats {
  uint64_t rebuilds = 0;   // graphs built (all contexts of this engine)
  uint64_t reuses = 0;     // forwards that reused a cached graph
  uint64_t executes = 0;   // forwards that ran
  uint64_t graph_uid = 0;  // uid of the graph the last forward ran
};

// The model side, immutable after load and shared by every context (and thread): the
// mapped file, weights and hparams, the tokenizer. Contexts hold it by shared_ptr, so
// it outlives the last of them.
class LoadedModel {
 public:
  // Opens a GGUF (path or first split part), loads the model and the tokenizer.
  static Result<std::shared_ptr<const LoadedModel>> open(const std::string& path);
  // Same from an open file; a model without tokenizer metadata gets no tokenizer
  // (tests of the forward alone).
  static Result<std::shared_ptr<const LoadedModel>> create(gguf::Model file);
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const model::Model& model() const { return *model_; }
  const model::HParams& hparams() const { return model_->hparams(); }
  const gguf::Model& file() const { return file_; }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const tokenizer::Tokenizer& tokenizer() const;  // MINFER_CHECK has_tokenizer()
  // Every token's bytes, built once with the tokenizer: the one table the CLI, the chat
  // and the server's slots read (MINFER_CHECK has_tokenizer()).
  const TokenBytes& token_bytes() const;

 private:
  LoadedModel() = default;
  gguf::Model file_;  // first: the model's views point into its mapping
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<TokenBytes> token_bytes_;
};

// One independent KV arena over a shared model: KV cells and regions, the runtime
// cache (graphs with their allocation and split plans), the scheduler with its CPU
// backend and thread pool. Not thread-safe: one thread drives a context; several
// contexts may run side by side over one LoadedModel.
class Context {
 public:
  // Creates the CPU backend for `model`; checks the numerics / cache type pair. The
  // KV is sized later (set_n_ctx / set_context).
  static Result<std::unique_ptr<Context>> create(std::shared_ptr<const LoadedModel> model,
                                                 const EngineOptions& options = {});
  virtual ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const LoadedModel& loaded() const { return *loaded_; }
  const std::shared_ptr<const LoadedModel>& shared_model() const { return loaded_; }
  const model::Model& model() const { return loaded_->model(); }
  const model::HParams& hparams() const { return loaded_->hparams(); }
  const gguf::Model& file() const { return loaded_->file(); }
  bool has_tokenizer() const { return loaded_->has_tokenizer(); }
  const tokenizer::Tokenizer& tokenizer() const { return loaded_->tokenizer(); }
  const TokenBytes& token_bytes() const { return loaded_->token_bytes(); }
  int32_t n_threads() const { return n_threads_; }

  // Sizes the KV for one sequence (0) of n_ctx positions, rows unpadded (the CLI, the
  // chat, bench's single-stream tests). A different n_ctx replaces the graph cache and its
  // allocator (regions are sized once per n_ctx, never grown); the same n_ctx only
  // frees every cell. Error: n_ctx 0 or beyond the model's context_length.
  Status set_n_ctx(uint32_t n_ctx);
  // The general form: an arena of n_cells cells for up to n_seq_max sequences. Same
  // rule as set_n_ctx: equal options only free every cell. Errors: zero sizes,
  // n_ctx_seq beyond the model's context_length or beyond n_cells, n_seq_max outside
  // [1, kv::kMaxSeqs].
  Status set_context(const ContextOptions& options);
  uint32_t n_ctx() const { return n_ctx_; }  // cells of the arena
  uint32_t n_ctx_seq() const { return context_.n_ctx_seq; }
  const ContextOptions& context_options() const { return context_; }
  // Frees every KV cell (regions keep stale bytes: the cells are the truth).
  void clear_kv();

  // One forward over any mix of sequences (ARCHITECTURE §2b): places every row's K/V
  // in a cell of its sequence, lets each row attend to its own sequence's cells up to
  // its position, and returns the logits of the rows that asked. With pad_rows the row
  // count is padded to bucket_rows(n) with rows that store nothing and read nothing,
  // and the logit rows to bucket_rows(n_logits), so the graph depends on those two
  // numbers only (without, on n and n_logits). Batch invariance: a row's logits are
  // bit-identical whatever else shares the batch, its order and the thread count. Errors (nothing
  // placed or run): empty batch, no logit row, a position outside [0, n_ctx_seq), a sequence
  // outside [0, n_seq_max), a token outside the vocabulary, a (seq, pos) twice, no free cell. Cell
  // placement: a sequence that reserved its cells (kv_cells()->reserve(seq, n)) fills them in
  // order, so its window stays one run (plus one per shared prefix); unreserved sequences decoding
  // side by side interleave their cells, and the window layout grows (a new graph; bits unchanged).
  // Servers reserve per request.
  Result<BatchLogits> decode(const Batch& batch);
  // The cell store, for sequence operations between decodes (seq_rm to free a
  // finished or cancelled sequence, seq_cp to share a cached prefix). Null before
  // set_context.
  kv::KvCells* kv_cells() { return kv_ ? &*kv_ : nullptr; }

  // Session files (src/chat): the K and V bytes of positions [0, n_tokens) of
  // sequence 0 — for each position, every layer's K row then V row, as stored.
  // kv_token_bytes() is the size of one position's record (0 before any forward has
  // created the regions). Error: no context, or a position in range that no cell holds.
  uint64_t kv_token_bytes() const;
  // The element formats of the K and the V cache (session files record them).
  graph::KvFormats kv_format() const { return options_.kv_format; }
  // Whether this context's K or V rows are stored rotated by llama.cpp's Walsh-Hadamard
  // matrices (model::kv_rotation: --numerics llamacpp, a quantized cache, head size a
  // multiple of 64): rows stored one way read as garbage the other (session files).
  bool kv_rotated() const;
  Result<std::vector<std::byte>> kv_export(uint32_t n_tokens) const;
  // Restores positions [0, n_tokens) from kv_export bytes (same model and n_ctx; the
  // caller checks that): frees every cell, creates the regions if no graph has run
  // yet, places the positions and copies the rows. No forward runs. Error: size
  // mismatch, n_tokens > n_ctx.
  Status kv_import(uint32_t n_tokens, std::span<const std::byte> data);
  // The same for sequence `seq` of a context of several (the server's slots): positions
  // [0, n_tokens) of that sequence. The import frees that sequence's cells only; the
  // others keep theirs. Error: n_tokens past n_ctx_seq, no free cells for them.
  Result<std::vector<std::byte>> kv_export_seq(kv::SeqId seq, uint32_t n_tokens) const;
  Status kv_import_seq(kv::SeqId seq, uint32_t n_tokens, std::span<const std::byte> data);

  // The params a forward of this shape uses (the reuse identity).
  graph::GraphParams params_for(uint32_t n_tokens, uint32_t n_out, int32_t n_runs = 1) const;
  // The graph the runtime would run for that shape — built, placed and fused, not
  // cached or run (--dump-graph).
  Result<graph::ComputeGraph> runtime_graph(uint32_t n_tokens, uint32_t n_out) const;

  EngineStats stats() const { return stats_; }
  const graph::CacheStats& cache_stats() const;
  const sched::SchedStats& sched_stats() const { return sched_.stats(); }
  size_t scheduler_plans() const { return sched_.n_plans(); }
  // The split plan the last forward ran (its splits and the copies one step moves).
  const sched::SplitPlan* split_plan() const { return sched_.find_plan(stats_.graph_uid); }
  // Where -ngl placed the layers (part of every GraphParams this context builds).
  const graph::LayerPlacement& placement() const { return placement_; }
  // Per-op timing of every forward from now on (the viz live panel, --dump-trace);
  // nullptr turns it off. The hook runs on the thread that drives this context.
  void set_profile_hook(sched::ProfileHook hook) { sched_.set_profile_hook(std::move(hook)); }
  // The cache of the current context (null before set_n_ctx); tests inspect it.
  graph::GraphCache* cache() { return cache_.get(); }
  alloc::Allocator* allocator();
  const kv::KvCells* kv() const { return kv_ ? &*kv_ : nullptr; }

 protected:
  explicit Context(std::shared_ptr<const LoadedModel> model) : loaded_(std::move(model)) {}
  Status init(const EngineOptions& options);

 private:
  Status rebuild(const graph::GraphParams& params);
  graph::ComputeGraph build_runtime(const graph::GraphParams& params) const;

  // Uploads, once per context, every weight a non-CPU backend's nodes read (-ngl).
  Status upload_weights();

  std::shared_ptr<const LoadedModel> loaded_;
  const model::Model* model_ = nullptr;  // = &loaded_->model()
  EngineOptions options_;
  int32_t n_threads_ = 0;
  sched::Scheduler sched_;  // before every buffer of its backends' memory (dies last)
  graph::LayerPlacement placement_;
  struct DeviceWeight {
    std::string name;
    graph::BackendId backend = graph::kBackendCpu;
    std::byte* data = nullptr;  // the backend's address
    uint64_t bytes = 0;
  };
  std::vector<DeviceWeight> device_weights_;   // bound into every allocator (set_context)
  std::vector<alloc::Buffer> weight_buffers_;  // one per device that holds weights
  std::vector<float> logits_host_;             // a device-resident head's logits, read with get

  Result<const graph::ComputeGraph*> prepare(const graph::GraphParams& params);

  uint32_t n_ctx_ = 0;
  // kv_import and kv_import_seq: checks, then frees every cell (free_all) or `seq`'s.
  Status import_rows(kv::SeqId seq, uint32_t n_tokens, std::span<const std::byte> data,
                     bool free_all);
  ContextOptions context_;
  std::unique_ptr<graph::GraphCache> cache_;
  std::optional<kv::KvCells> kv_;
  EngineStats stats_;

  // Per-step scratch, grown only when a larger batch arrives (decode never grows it).
  std::vector<kv::KvToken> batch_;
  std::vector<int32_t> cells_;
  std::vector<int32_t> window_;
  std::vector<int32_t> window_swa_;  // sliding-window layers' runs (hparams().n_swa > 0)
  std::vector<int32_t> tail_;
  std::vector<TokenId> tokens_;       // decode(): padded token ids
  std::vector<int32_t> types_;        // decode(): padded token types (cross-encoders)
  std::vector<int32_t> positions_;    // decode(): padded positions
  std::vector<int32_t> slot_of_row_;  // decode(): per batch row, its logits slot or -1
};

// A context that loaded its own model: the single-user CLI, the chat and tests. Every
// method is the Context's; shared_model() hands the model to further contexts.
class Engine final : public Context {
 public:
  static Result<std::unique_ptr<Engine>> open(const std::string& path,
                                              const EngineOptions& options = {});
  static Result<std::unique_ptr<Engine>> create(gguf::Model file,
                                                const EngineOptions& options = {});

 private:
  using Context::Context;
};

}  // namespace minfer::engine
