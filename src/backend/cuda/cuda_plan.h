// Stage 12 (CUDA backend): the host-side bookkeeping of the CUDA backend, in plain C++
// (no CUDA header, no runtime) so it is unit tested on a machine without a GPU: which
// (op, dtypes) have a kernel, the CUDA-graph capture cache keyed by graph uid, the fence
// ring, and the scratch a graph needs.
// Invariants: supports_op accepts a node only when kernel_list.h names a kernel for it
// (no silent fallback); a capture is replayed only for the same uid, split and node
// addresses it was captured with; a fence token is waited on through an event recorded
// no earlier than it (a reused ring slot waits longer, never shorter).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cuda/kernel_list.h"
#include "core/dtype.h"
#include "core/result.h"
#include "graph/graph.h"

namespace minfer::backend::cuda {

struct KernelEntry {
  graph::Op op;
  DType dtype;       // key dtype (kernel_list.h)
  const char* name;  // the launcher's name without launch_
};
// Every entry of MINFER_CUDA_KERNELS, in list order.
std::span<const KernelEntry> kernel_entries();
// The entry serving (op, key dtype), or nullptr.
const KernelEntry* find_kernel(graph::Op op, DType key);
// The key dtype a node is looked up by (kernel_list.h): source 0's dtype for get_rows,
// kv_store, attention and mul_mat; F32 otherwise.
DType key_dtype(const graph::Node& node, std::span<const DType> src_dtypes);

// Limits of the kernels (the attention keeps a head's accumulator in registers).
inline constexpr int64_t kMaxHeadDim = 256;

// What the CUDA kernels accept: an entry for (op, key dtype) plus the dtypes and shapes
// of the other sources that kernel reads. Aliases (reshape, view) are always accepted.
bool cuda_supports(const graph::Node& node, std::span<const DType> src_dtypes);

// Attention cuts a window into splits of this many cells (whole 64-cell chunks); a
// decode step's (token, head) rows with a long window give each split its own block when
// the partial states fit the scratch cap (ops_attention.cu: the bits are the same either way).
inline constexpr int64_t kAttentionSplitCells = 512;
inline constexpr int64_t kAttentionSplitRowsMax = 256;                   // (token, head) rows
inline constexpr uint64_t kAttentionSplitBytesMax = uint64_t{64} << 20;  // partial states
// The splits a window over a region of n_cells cells in n_runs runs can have.
int64_t attention_max_splits(int64_t n_cells, int64_t n_runs);
// Scratch of the split-per-block mode (partial m, l, acc per row and split), or 0 where
// the node runs one block per (token, head) row.
uint64_t attention_split_bytes(int64_t n_tok, int64_t n_head, int64_t hd_v, int64_t n_cells,
                               int64_t n_runs);
// Scratch one node needs (mul_mat's converted activations, attention's partial states).
uint64_t node_scratch_bytes(const graph::ComputeGraph& graph, graph::NodeId id);

// Device bytes a split of `graph` on `backend` needs beside its nodes' memory: mul_mat
// converts its F32 activations to the weight's activation format (q8_0 for Q4_0, Q5_0,
// Q8_0; q8_1 for Q4_1, Q5_1; q8_K for Q4_K, Q5_K, Q6_K; f16 for F16) before the dot
// products, and attention's split states; nodes run in stream order, so one buffer of
// the largest need serves them all.
uint64_t scratch_bytes(const graph::ComputeGraph& graph, graph::BackendId backend);
// The activation format of a mul_mat weight type (F32: none needed) and its row bytes.
DType activation_type(DType weight);
uint64_t activation_row_bytes(DType weight, int64_t k);

// CUDA-graph captures, keyed by (graph uid, the split's first node, its node count):
// the scheduler executes one uid's splits in the same order every step, and the memory
// behind a uid's nodes is fixed while the uid lives (runtime cache), so a captured split
// replays the same launches over the same addresses. The address fingerprint is checked
// anyway: a different one re-captures rather than replaying stale pointers.
struct CaptureKey {
  uint64_t uid = 0;
  int32_t first_node = 0;
  int32_t n_nodes = 0;
  bool operator==(const CaptureKey&) const = default;
};

class CaptureCache {
 public:
  enum class Action : uint8_t {
    kDirect,   // launch the kernels on the stream (graphs off, or an unstamped graph)
    kCapture,  // capture the launches, store the instantiated graph, launch it
    kReplay,   // launch the stored graph
  };
  struct Decision {
    Action action = Action::kDirect;
    void* stale = nullptr;  // a capture of this key over other addresses: destroy it
  };
  explicit CaptureCache(bool enabled) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // What execute does for `key` whose nodes' addresses hash to `fingerprint`. A graph
  // without a uid (0: not stamped by a GraphCache) is never captured.
  Decision on_execute(const CaptureKey& key, uint64_t fingerprint);
  // Stores the instantiated graph of a kCapture decision.
  void store(const CaptureKey& key, uint64_t fingerprint, void* exec);
  // The stored graph of `key` (nullptr: none).
  void* find(const CaptureKey& key) const;
  // Drops every capture of `uid` (release(uid)); the caller destroys what it returns.
  std::vector<void*> release(uint64_t uid);
  // Drops every capture (the scratch moved); the caller destroys what it returns.
  std::vector<void*> clear();
  size_t size() const { return entries_.size(); }

  struct Counters {
    uint64_t direct = 0, captures = 0, replays = 0, recaptures = 0, released = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Entry {
    CaptureKey key;
    uint64_t fingerprint = 0;
    void* exec = nullptr;
  };
  bool enabled_;
  std::vector<Entry> entries_;
  Counters counters_;
};

// FNV-1a over the addresses a split's launches use (CaptureCache's fingerprint).
uint64_t fingerprint_addresses(std::span<const uint64_t> addresses);

// The fences of one stream: token t (1, 2, …) is recorded into slot t % n_slots of a
// ring of events created once. Events complete in stream order, so a token whose slot
// was reused by a later record is waited on through that later event (a longer wait,
// never a shorter one).
class FenceRing {
 public:
  explicit FenceRing(uint32_t n_slots);
  uint32_t n_slots() const { return n_slots_; }
  uint64_t last() const { return last_; }
  struct Record {
    uint64_t token;
    uint32_t slot;
  };
  // The next token and the slot to record its event into.
  Record record();
  // The slot to wait on for `token`; nullopt for token 0 (nothing to wait for).
  // Error: a token never recorded.
  Result<std::optional<uint32_t>> wait_slot(uint64_t token) const;

 private:
  uint32_t n_slots_;
  uint64_t last_ = 0;
};

}  // namespace minfer::backend::cuda
