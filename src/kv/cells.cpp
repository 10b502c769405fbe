// Stage 10 (KV cells): cell bookkeeping, placement and window runs.
// Invariant: index_ and (pos_, seqs_) always describe the same mapping.
#include "kv/cells.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/check.h"

namespace minfer::kv {
namespace {

uint64_t bit(SeqId seq) {
  return uint64_t{1} << seq;
}

}  // namespace

Result<DType> kv_dtype(graph::KvFormat format) {
  if (format == graph::KvFormat::kF32) return DType::kF32;
  if (format == graph::KvFormat::kF16) return DType::kF16;
  if (format == graph::KvFormat::kQ8_0) return DType::kQ8_0;
  if (format == graph::KvFormat::kQ4_0) return DType::kQ4_0;
  return make_error(fmt::format("KV format {} is not implemented", graph::kv_format_name(format)));
}

Result<KvCells> KvCells::create(const KvOptions& o) {
  if (o.n_ctx == 0) return make_error("KV cells: n_ctx is 0");
  if (o.n_seq_max == 0 || o.n_seq_max > kMaxSeqs) {
    return make_error(fmt::format("KV cells: n_seq_max {} outside 1..{}", o.n_seq_max, kMaxSeqs));
  }
  MINFER_TRY_STATUS(kv_dtype(o.format.k));
  MINFER_TRY_STATUS(kv_dtype(o.format.v));
  KvCells c;
  c.n_ctx_ = o.n_ctx;
  c.n_seq_max_ = o.n_seq_max;
  c.format_ = o.format;
  c.pos_.assign(o.n_ctx, -1);
  c.seqs_.assign(o.n_ctx, 0);
  c.reserved_by_.assign(o.n_ctx, -1);
  c.reservations_.assign(o.n_seq_max, std::nullopt);
  c.index_.assign(static_cast<size_t>(o.n_ctx) * o.n_seq_max, -1);
  c.shift_.assign(o.n_ctx, 0);
  c.scratch_.assign(o.n_ctx, 0);
  return c;
}

Status KvCells::check_seq(SeqId seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= n_seq_max_) {
    return make_error(fmt::format("KV: sequence {} outside 0..{}", seq, n_seq_max_ - 1));
  }
  return Ok{};
}

bool KvCells::has_seq(int32_t cell, SeqId seq) const {
  return seq >= 0 && static_cast<uint32_t>(seq) < n_seq_max_ &&
         (seqs_.at(static_cast<size_t>(cell)) & bit(seq)) != 0;
}

std::optional<int32_t> KvCells::find(SeqId seq, Pos pos) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= n_seq_max_ || pos < 0 ||
      static_cast<uint32_t>(pos) >= n_ctx_) {
    return std::nullopt;
  }
  const int32_t cell = index_[static_cast<size_t>(seq) * n_ctx_ + pos];
  if (cell < 0) return std::nullopt;
  return cell;
}

Pos KvCells::seq_pos_min(SeqId seq) const {
  for (Pos p = 0; static_cast<uint32_t>(p) < n_ctx_; ++p) {
    if (find(seq, p)) return p;
  }
  return -1;
}

Pos KvCells::seq_pos_max(SeqId seq) const {
  for (Pos p = static_cast<Pos>(n_ctx_) - 1; p >= 0; --p) {
    if (find(seq, p)) return p;
  }
  return -1;
}

namespace {
// A non-causal batch asks every query's sequence for its highest position: scanned once
// per sequence per call (a scan is O(n_ctx); per query it was O(batch · n_ctx)). A fixed
// table, no allocation.
struct SeqMaxMemo {
  std::array<Pos, kMaxSeqs> max;
  std::array<bool, kMaxSeqs> known{};
  Pos get(const KvCells& cells, SeqId seq) {
    const auto s = static_cast<size_t>(seq);
    if (!known[s]) {
      max[s] = cells.seq_pos_max(seq);
      known[s] = true;
    }
    return max[s];
  }
};
}  // namespace

void KvCells::set_index(SeqId seq, Pos pos, int32_t cell) {
  index_[static_cast<size_t>(seq) * n_ctx_ + pos] = cell;
}

void KvCells::remove_from_cell(int32_t cell, uint64_t mask) {
  const uint64_t removed = seqs_[cell] & mask;
  if (removed == 0) return;
  for (uint32_t s = 0; s < n_seq_max_; ++s) {
    if (removed & bit(static_cast<SeqId>(s))) set_index(static_cast<SeqId>(s), pos_[cell], -1);
  }
  seqs_[cell] &= ~mask;
  if (seqs_[cell] == 0) {
    pos_[cell] = -1;
    shift_[cell] = 0;
    n_used_--;
  }
}

bool KvCells::reserved_for_other(int32_t cell, SeqId seq) const {
  return reserved_by_[cell] >= 0 && reserved_by_[cell] != seq;
}

Result<CellRange> KvCells::reserve(SeqId seq, uint32_t n_cells) {
  MINFER_TRY_STATUS(check_seq(seq));
  if (reservations_[seq]) {
    return make_error(fmt::format("KV: sequence {} already holds a reservation", seq));
  }
  if (n_cells == 0 || n_cells > n_ctx_) {
    return make_error(fmt::format("KV: reservation of {} cells outside 1..{}", n_cells, n_ctx_));
  }
  uint32_t run = 0;
  for (uint32_t c = 0; c < n_ctx_; ++c) {
    const bool usable = reserved_by_[c] < 0 && (seqs_[c] == 0 || seqs_[c] == bit(seq));
    run = usable ? run + 1 : 0;
    if (run == n_cells) {
      const CellRange r{static_cast<int32_t>(c + 1 - n_cells), static_cast<int32_t>(n_cells)};
      for (int32_t i = r.first; i < r.first + r.n; ++i) reserved_by_[i] = seq;
      reservations_[seq] = r;
      return r;
    }
  }
  return make_error(fmt::format("KV: no run of {} free cells for sequence {} ({} of {} in use)",
                                n_cells, seq, n_used_, n_ctx_));
}

void KvCells::release(SeqId seq) {
  if (check_seq(seq).ok() && reservations_[seq]) {
    const CellRange r = *reservations_[seq];
    for (int32_t i = r.first; i < r.first + r.n; ++i) reserved_by_[i] = -1;
    reservations_[seq].reset();
  }
}

std::optional<CellRange> KvCells::reservation(SeqId seq) const {
  if (!check_seq(seq).ok()) return std::nullopt;
  return reservations_[seq];
}

Result<std::vector<int32_t>> KvCells::place(std::span<const KvToken> batch) {
  std::vector<int32_t> cells(batch.size(), -1);
  MINFER_TRY_STATUS(place_into(batch, cells));
  return cells;
}

Status KvCells::place_into(std::span<const KvToken> batch, std::span<int32_t> cells) {
  if (cells.size() != batch.size()) {
    return make_error(fmt::format("KV: place_into given {} cell slots for {} batch rows",
                                  cells.size(), batch.size()));
  }
  // Phase 1: validate and choose cells without changing any state.
  for (size_t i = 0; i < batch.size(); ++i) {
    const KvToken& t = batch[i];
    MINFER_TRY_STATUS(check_seq(t.seq));
    if (t.pos < 0 || static_cast<uint32_t>(t.pos) >= n_ctx_) {
      return make_error(
          fmt::format("KV: position {} of sequence {} is outside the context "
                      "(n_ctx {})",
                      t.pos, t.seq, n_ctx_));
    }
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].seq == t.seq && batch[j].pos == t.pos) {
        return make_error(
            fmt::format("KV: batch rows {} and {} both write sequence {} "
                        "position {}",
                        j, i, t.seq, t.pos));
      }
    }
  }
  std::fill(cells.begin(), cells.end(), -1);
  std::fill(scratch_.begin(), scratch_.end(), uint8_t{0});
  Status failure = Ok{};
  for (size_t i = 0; i < batch.size() && failure.ok(); ++i) {
    const KvToken& t = batch[i];
    if (auto existing = find(t.seq, t.pos); existing && seqs_[*existing] == bit(t.seq)) {
      cells[i] = *existing;  // sole owner: overwrite in place
      scratch_[*existing] = 1;
      continue;
    }
    int32_t lo = 0, hi = static_cast<int32_t>(n_ctx_);
    if (reservations_[t.seq]) {
      lo = reservations_[t.seq]->first;
      hi = lo + reservations_[t.seq]->n;
    }
    for (int32_t c = lo; c < hi; ++c) {
      if (seqs_[c] == 0 && !scratch_[c] && !reserved_for_other(c, t.seq)) {
        cells[i] = c;
        scratch_[c] = 1;
        break;
      }
    }
    if (cells[i] < 0) {
      failure = make_error(
          reservations_[t.seq]
              ? fmt::format("KV: sequence {} exhausted its reservation (position {})", t.seq, t.pos)
              : fmt::format("KV: no free cell for sequence {} position {} (cache full)", t.seq,
                            t.pos));
    }
  }
  if (!failure.ok()) return failure.error();
  // Phase 2: apply.
  for (size_t i = 0; i < batch.size(); ++i) {
    const KvToken& t = batch[i];
    if (auto existing = find(t.seq, t.pos); existing && *existing != cells[i]) {
      remove_from_cell(*existing, bit(t.seq));  // copy on write: leave the shared cell
    }
    const int32_t c = cells[i];
    if (seqs_[c] == 0) n_used_++;
    pos_[c] = t.pos;
    seqs_[c] = bit(t.seq);
    shift_[c] = 0;
    set_index(t.seq, t.pos, c);
  }
  return Ok{};
}

Result<std::vector<int32_t>> KvCells::window(std::span<const KvToken> queries,
                                             const WindowOptions& o) const {
  if (o.n_runs < 1) return make_error(fmt::format("KV window: n_runs {} < 1", o.n_runs));
  std::vector<int32_t> out(2 * static_cast<size_t>(o.n_runs) * queries.size(), 0);
  MINFER_TRY_STATUS(window_into(queries, o, out));
  return out;
}

Status KvCells::window_into(std::span<const KvToken> queries, const WindowOptions& o,
                            std::span<int32_t> out) const {
  if (o.n_runs < 1) return make_error(fmt::format("KV window: n_runs {} < 1", o.n_runs));
  const size_t stride = 2 * static_cast<size_t>(o.n_runs);
  if (out.size() != stride * queries.size()) {
    return make_error(fmt::format("KV window: window_into given {} slots for {} queries × {}",
                                  out.size(), queries.size(), stride));
  }
  std::fill(out.begin(), out.end(), 0);
  if (o.sliding < 0 || (o.sliding > 0 && !o.causal)) {
    return make_error(fmt::format("KV window: sliding {} needs causal and >= 0", o.sliding));
  }
  if (o.sliding > 0) return sliding_window_into(queries, o, out);
  // Runs are written straight into the query's row (no scratch, so the decode loop
  // allocates nothing). Consecutive queries of one sequence with rising positions (a
  // prefill) copy the previous row's runs and extend them instead of rescanning from
  // position 0. `n_needed` keeps counting past the layout so the error can say how
  // many runs the query would need.
  size_t n_needed = 0;
  int32_t last_end = -1;  // one past the last cell of the last run
  SeqId run_seq = -1;
  Pos scanned = -1;  // positions [0, scanned] of run_seq are counted in the runs
  SeqMaxMemo seq_max;
  for (size_t q = 0; q < queries.size(); ++q) {
    const KvToken& t = queries[q];
    MINFER_TRY_STATUS(check_seq(t.seq));
    if (t.pos < 0 || static_cast<uint32_t>(t.pos) >= n_ctx_) {
      return make_error(fmt::format("KV window: query position {} outside the context (n_ctx {})",
                                    t.pos, n_ctx_));
    }
    const Pos limit = o.causal ? t.pos : seq_max.get(*this, t.seq);
    int32_t* row = out.data() + q * stride;
    if (t.seq != run_seq || limit < scanned) {
      n_needed = 0;
      last_end = -1;
      run_seq = t.seq;
      scanned = -1;
    } else if (q > 0) {
      std::copy(row - stride, row, row);
    }
    for (Pos p = scanned + 1; p <= limit; ++p) {
      auto cell = find(t.seq, p);
      if (!cell) continue;
      if (n_needed > 0 && last_end == *cell) {
        if (n_needed <= static_cast<size_t>(o.n_runs)) row[2 * (n_needed - 1) + 1]++;
      } else {
        if (n_needed < static_cast<size_t>(o.n_runs)) {
          row[2 * n_needed] = *cell;
          row[2 * n_needed + 1] = 1;
        }
        n_needed++;
      }
      last_end = *cell + 1;
    }
    scanned = std::max(scanned, limit);
    if (n_needed == 0) {
      return make_error(
          fmt::format("KV window: query (sequence {}, position {}) sees no cell "
                      "(place the batch first)",
                      t.seq, t.pos));
    }
    if (n_needed > static_cast<size_t>(o.n_runs)) {
      return make_error(fmt::format(
          "KV window: query (sequence {}, position {}) needs {} runs; the window layout has {} "
          "(raise CParams::window.n_runs or reserve contiguous cells)",
          t.seq, t.pos, n_needed, o.n_runs));
    }
  }
  return Ok{};
}

// The sliding form rescans each query's [pos - sliding + 1, pos] (the window's start
// moves with the query, so the prefill shortcut above does not apply): O(sliding) cell
// lookups per query, each O(1).
Status KvCells::sliding_window_into(std::span<const KvToken> queries, const WindowOptions& o,
                                    std::span<int32_t> out) const {
  const size_t stride = 2 * static_cast<size_t>(o.n_runs);
  for (size_t q = 0; q < queries.size(); ++q) {
    const KvToken& t = queries[q];
    MINFER_TRY_STATUS(check_seq(t.seq));
    if (t.pos < 0 || static_cast<uint32_t>(t.pos) >= n_ctx_) {
      return make_error(fmt::format("KV window: query position {} outside the context (n_ctx {})",
                                    t.pos, n_ctx_));
    }
    int32_t* row = out.data() + q * stride;
    size_t n_needed = 0;
    int32_t last_end = -1;
    for (Pos p = std::max<Pos>(0, t.pos - o.sliding + 1); p <= t.pos; ++p) {
      auto cell = find(t.seq, p);
      if (!cell) continue;
      if (n_needed > 0 && last_end == *cell) {
        if (n_needed <= static_cast<size_t>(o.n_runs)) row[2 * (n_needed - 1) + 1]++;
      } else {
        if (n_needed < static_cast<size_t>(o.n_runs)) {
          row[2 * n_needed] = *cell;
          row[2 * n_needed + 1] = 1;
        }
        n_needed++;
      }
      last_end = *cell + 1;
    }
    if (n_needed == 0) {
      return make_error(
          fmt::format("KV window: query (sequence {}, position {}) sees no cell "
                      "(place the batch first)",
                      t.seq, t.pos));
    }
    if (n_needed > static_cast<size_t>(o.n_runs)) {
      return make_error(fmt::format(
          "KV window: query (sequence {}, position {}) needs {} runs in its sliding window; the "
          "window layout has {}",
          t.seq, t.pos, n_needed, o.n_runs));
    }
  }
  return Ok{};
}

Result<int32_t> KvCells::runs_needed(std::span<const KvToken> queries, bool causal) const {
  // Runs only grow with the query's limit, so each sequence's highest limit decides.
  // A fixed table (no allocation: decode calls this every step).
  std::array<Pos, kMaxSeqs> limits;
  limits.fill(-1);
  SeqMaxMemo seq_max;
  for (const KvToken& t : queries) {
    MINFER_TRY_STATUS(check_seq(t.seq));
    if (t.pos < 0 || static_cast<uint32_t>(t.pos) >= n_ctx_) {
      return make_error(fmt::format("KV window: query position {} outside the context (n_ctx {})",
                                    t.pos, n_ctx_));
    }
    const Pos limit = causal ? t.pos : seq_max.get(*this, t.seq);
    Pos& l = limits[static_cast<size_t>(t.seq)];
    l = std::max(l, limit);
  }
  int32_t most = 0;
  for (SeqId seq = 0; seq < static_cast<SeqId>(kMaxSeqs); ++seq) {
    const Pos limit = limits[static_cast<size_t>(seq)];
    if (limit < 0) continue;
    int32_t runs = 0;
    int32_t last_end = -1;
    for (Pos p = 0; p <= limit; ++p) {
      const auto cell = find(seq, p);
      if (!cell) continue;
      if (runs == 0 || last_end != *cell) runs++;
      last_end = *cell + 1;
    }
    most = std::max(most, runs);
  }
  return most;
}

uint32_t KvCells::seq_rm(SeqId seq, Pos p0, Pos p1) {
  if (seq >= 0 && !check_seq(seq).ok()) return 0;
  const uint64_t mask = seq < 0 ? ~uint64_t{0} : bit(seq);
  if (p0 < 0) p0 = 0;
  uint32_t freed = 0;
  for (uint32_t c = 0; c < n_ctx_; ++c) {
    if (pos_[c] < 0 || pos_[c] < p0 || (p1 >= 0 && pos_[c] >= p1)) continue;
    if ((seqs_[c] & mask) == 0) continue;
    remove_from_cell(static_cast<int32_t>(c), mask);
    if (seqs_[c] == 0) freed++;
  }
  return freed;
}

Status KvCells::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  MINFER_TRY_STATUS(check_seq(src));
  MINFER_TRY_STATUS(check_seq(dst));
  if (src == dst) return Ok{};
  if (p0 < 0) p0 = 0;
  auto in_range = [&](uint32_t c) {
    return pos_[c] >= p0 && (p1 < 0 || pos_[c] < p1) && (seqs_[c] & bit(src));
  };
  for (uint32_t c = 0; c < n_ctx_; ++c) {
    if (!in_range(c)) continue;
    if (auto other = find(dst, pos_[c]); other && *other != static_cast<int32_t>(c)) {
      return make_error(
          fmt::format("KV seq_cp: sequence {} already holds position {} in cell "
                      "{} (remove it first)",
                      dst, pos_[c], *other));
    }
  }
  for (uint32_t c = 0; c < n_ctx_; ++c) {
    if (!in_range(c)) continue;
    seqs_[c] |= bit(dst);
    set_index(dst, pos_[c], static_cast<int32_t>(c));
  }
  return Ok{};
}

Status KvCells::seq_shift(SeqId seq, Pos p0, Pos p1, Pos delta) {
  MINFER_TRY_STATUS(check_seq(seq));
  if (delta == 0) return Ok{};
  if (p0 < 0) p0 = 0;
  auto in_range = [&](uint32_t c) {
    return pos_[c] >= p0 && (p1 < 0 || pos_[c] < p1) && (seqs_[c] & bit(seq));
  };
  for (uint32_t c = 0; c < n_ctx_; ++c) {
    if (!in_range(c)) continue;
    if (seqs_[c] != bit(seq)) {
      return make_error(
          fmt::format("KV seq_shift: cell {} (position {}) is shared with other "
                      "sequences",
                      c, pos_[c]));
    }
    const int64_t np = int64_t{pos_[c]} + delta;
    if (np >= n_ctx_) {
      return make_error(
          fmt::format("KV seq_shift: position {} + {} is outside the context "
                      "(n_ctx {})",
                      pos_[c], delta, n_ctx_));
    }
    if (np >= 0) {
      auto other = find(seq, static_cast<Pos>(np));
      if (other && !in_range(static_cast<uint32_t>(*other))) {
        return make_error(
            fmt::format("KV seq_shift: position {} would collide with cell {}", np, *other));
      }
    }
  }
  // Apply: clear the sequence's index for the moved cells first (targets may overlap
  // sources), then re-index the survivors at their new positions.
  std::vector<int32_t> moved;
  for (uint32_t c = 0; c < n_ctx_; ++c) {
    if (!in_range(c)) continue;
    set_index(seq, pos_[c], -1);
    moved.push_back(static_cast<int32_t>(c));
  }
  for (int32_t c : moved) {
    const Pos np = pos_[c] + delta;
    if (np < 0) {
      seqs_[c] = 0;
      pos_[c] = -1;
      shift_[c] = 0;
      n_used_--;
      continue;
    }
    pos_[c] = np;
    shift_[c] += delta;
    set_index(seq, np, c);
    has_shift_ = true;
  }
  return Ok{};
}

std::vector<int32_t> KvCells::take_shifts() {
  if (!has_shift_) return {};
  std::vector<int32_t> out = shift_;
  std::fill(shift_.begin(), shift_.end(), 0);
  has_shift_ = false;
  return out;
}

void KvCells::clear() {
  std::fill(pos_.begin(), pos_.end(), -1);
  std::fill(seqs_.begin(), seqs_.end(), 0);
  std::fill(reserved_by_.begin(), reserved_by_.end(), -1);
  std::fill(reservations_.begin(), reservations_.end(), std::nullopt);
  std::fill(index_.begin(), index_.end(), -1);
  std::fill(shift_.begin(), shift_.end(), 0);
  has_shift_ = false;
  n_used_ = 0;
}

}  // namespace minfer::kv
