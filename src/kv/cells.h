// Stage 10 (KV cells): which cell holds which (sequence, position), per-sequence
// reservations, and the attention window each query may read — produced as graph
// INPUT data (graph/input_names.h), never as topology.
// Invariants: a (sequence, position) pair lives in at most one cell; a position
// >= n_ctx is an Error before anything is written (never clamped); every mutation
// that can fail checks first and changes nothing on error; windows list cells in
// ascending position order, so attention reduces in an order fixed by position.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "graph/params.h"

namespace minfer::kv {

using SeqId = int32_t;
using Pos = int32_t;

// Sequence sets are one 64-bit mask per cell (cheap to test and copy); more
// concurrent sequences than this is refused at creation, not silently wrapped.
inline constexpr uint32_t kMaxSeqs = 64;

struct KvOptions {
  uint32_t n_ctx = 0;       // cells, = the regions' extent
  uint32_t n_seq_max = 1;   // sequences that may coexist (1..kMaxSeqs)
  graph::KvFormats format;  // of the K and the V regions
};

// One row of a batch: the token at position `pos` of sequence `seq`.
struct KvToken {
  SeqId seq = 0;
  Pos pos = 0;
};

struct CellRange {
  int32_t first = 0;
  int32_t n = 0;
  bool operator==(const CellRange&) const = default;
};

struct WindowOptions {
  int32_t n_runs = 1;  // = CParams::window.n_runs (the input's shape)
  bool causal = true;  // a query reads positions <= its own; false: the whole sequence
  // > 0: sliding-window attention — a query at position p reads only positions
  // > p - sliding (llama.cpp's LLAMA_SWA_TYPE_STANDARD: masked when p - p_cell >= n_swa).
  // Needs causal. 0: no lower bound.
  int32_t sliding = 0;
};

// Element type of a region for a KV format: f32, f16, q8_0 or q4_0 (rows quantized in
// blocks of 32 by llama.cpp's reference quantizer as they are stored).
Result<DType> kv_dtype(graph::KvFormat format);

class KvCells {
 public:
  static Result<KvCells> create(const KvOptions& options);

  uint32_t n_ctx() const { return n_ctx_; }
  uint32_t n_seq_max() const { return n_seq_max_; }
  graph::KvFormats format() const { return format_; }
  uint32_t n_used() const { return n_used_; }
  // Position held by a cell, -1 when free.
  Pos pos(int32_t cell) const { return pos_.at(static_cast<size_t>(cell)); }
  bool has_seq(int32_t cell, SeqId seq) const;
  // Cell holding (seq, pos), if any.
  std::optional<int32_t> find(SeqId seq, Pos pos) const;
  Pos seq_pos_min(SeqId seq) const;  // -1 when the sequence holds no cell
  Pos seq_pos_max(SeqId seq) const;

  // Claims `n_cells` contiguous cells (free, or already held by seq alone) so the
  // sequence's tokens land contiguously and its window stays one run (server slots).
  // Error: seq already reserved, or no such run of cells.
  Result<CellRange> reserve(SeqId seq, uint32_t n_cells);
  void release(SeqId seq);  // drops the reservation; cells keep their contents
  std::optional<CellRange> reservation(SeqId seq) const;

  // Chooses the cell each batch row writes (the kv_cells input, I32 [n_tokens]) and
  // records (seq, pos) there. An existing (seq, pos) cell is overwritten when the
  // sequence owns it alone; a shared one is left to the other sequences and the row
  // gets a fresh cell (copy on write). Otherwise: the first free cell of the
  // sequence's reservation, or the first free unreserved cell. With one sequence
  // filled from 0, cell == position. All or nothing; Error when a position is < 0
  // or >= n_ctx, a seq is out of range, a (seq, pos) repeats, or no cell is free.
  Result<std::vector<int32_t>> place(std::span<const KvToken> batch);
  // place() into caller storage of exactly batch.size() cells: the allocation-free
  // form the decode loop uses (ARCHITECTURE §2: the steady-state step never allocates).
  Status place_into(std::span<const KvToken> batch, std::span<int32_t> cells);

  // The kv_window input, I32 [2 * n_runs, n_queries]: row t holds (first_cell, n_cells)
  // runs over the cells query t may read, in ascending position order, padded with
  // (0, 0). Call after place() so each query sees its own cell. Error when a query
  // needs more runs than the layout has, or sees no cell at all.
  Result<std::vector<int32_t>> window(std::span<const KvToken> queries,
                                      const WindowOptions& options) const;
  // window() into caller storage of exactly 2 * n_runs * queries.size() elements
  // (allocation-free; same contents and errors).
  Status window_into(std::span<const KvToken> queries, const WindowOptions& options,
                     std::span<int32_t> out) const;

  // The most window runs any of `queries` needs (what window_into needs as n_runs):
  // a sequence whose cells are not contiguous in position order needs one run per
  // contiguous piece. 0 when no query sees a cell. Error: a query out of range.
  Result<int32_t> runs_needed(std::span<const KvToken> queries, bool causal = true) const;

  // Removes `seq` (seq < 0: every sequence) from cells with p0 <= pos < p1 (p1 < 0:
  // no upper bound); cells left with no sequence become free. Returns cells freed.
  uint32_t seq_rm(SeqId seq, Pos p0, Pos p1);
  // Adds `dst` to every cell of `src` in [p0, p1): the cells are shared, not copied
  // (prefix sharing). Error when dst already holds one of those positions elsewhere.
  Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
  // Moves positions of `seq` in [p0, p1) by delta; positions that become negative are
  // removed. Records per-cell deltas for the K re-rope (take_shifts). Error when a
  // cell is shared, a new position is >= n_ctx, or it collides with another cell.
  Status seq_shift(SeqId seq, Pos p0, Pos p1, Pos delta);
  bool has_shift() const { return has_shift_; }
  // Accumulated per-cell position deltas since the last call (n_ctx entries), then
  // resets them; empty when nothing shifted.
  std::vector<int32_t> take_shifts();

  void clear();  // every cell free, reservations and shifts dropped

 private:
  KvCells() = default;
  Status check_seq(SeqId seq) const;
  Status sliding_window_into(std::span<const KvToken> queries, const WindowOptions& options,
                             std::span<int32_t> out) const;
  bool reserved_for_other(int32_t cell, SeqId seq) const;
  void set_index(SeqId seq, Pos pos, int32_t cell);
  void remove_from_cell(int32_t cell, uint64_t mask);

  uint32_t n_ctx_ = 0;
  uint32_t n_seq_max_ = 0;
  graph::KvFormats format_;
  uint32_t n_used_ = 0;
  std::vector<Pos> pos_;                                // per cell, -1 free
  std::vector<uint64_t> seqs_;                          // per cell, bit s set: sequence s reads it
  std::vector<SeqId> reserved_by_;                      // per cell, -1 unreserved
  std::vector<std::optional<CellRange>> reservations_;  // per sequence
  std::vector<int32_t> index_;                          // [seq * n_ctx + pos] → cell, -1 none
  std::vector<int32_t> shift_;                          // per cell, pending re-rope delta
  bool has_shift_ = false;
  std::vector<uint8_t> scratch_;  // place(): cells claimed by this batch
};

}  // namespace minfer::kv
