// Stage 12 (kernels): what the batch GEMMs share — per-thread scratch, and the driver of
// the one-lane-per-row GEMMs (vec_dot_avx512_rows.cpp, vec_dot_avx512_kquants.cpp): the
// call's weight rows re-laid once, in 16-row groups, then per tile of activation rows
// their blocks prepared and every group (or pair of groups) computed against them.
// Invariant: scratch only grows, on a thread's first call of a size. Which worker runs
// which chunk varies from step to step, so a decode step's kernels (one activation row)
// keep their per-call arrays on the stack instead: a decode step allocates nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {

// Cache-line-aligned storage: the GEMM tiles load 64-byte vectors from packed panels, and
// one that straddles two lines costs two loads (measured: an f32 tile ran ~40% slower on
// 16-byte-aligned panels than on 64-byte-aligned ones).
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  bool operator==(const LineAligned&) const = default;
  static constexpr std::align_val_t kAlign{64};
};

// n Ts of per-thread scratch, 64-byte aligned; one buffer per (T, Tag).
template <class T, int Tag = 0>
T* thread_scratch(size_t n) {
  thread_local std::vector<T, LineAligned<T>> v;
  if (v.size() < n) v.resize(n);
  return v.data();
}

// prep_w(n_groups, WG* out): out[g * nb + b] for 16-row group g, block b.
// prep_x(row, XT* out): out[b] for the nb blocks of one activation row (its bytes).
// tile(nx, ng, wg, xt, j0, g0): activation rows j0.. (nx of them, xt[j * nb + b]) against
//   groups g0.. (ng ≤ kGroupsPerTile of them, wg[g * nb + b] relative to g0).
template <class WG, class XT, int kMaxNX, int kGroupsPerTile, class PrepW, class PrepX, class Tile>
void gemm_groups(const GemmArgs& a, int64_t nb, PrepW&& prep_w, PrepX&& prep_x, Tile&& tile) {
  constexpr int64_t kRows = 16;
  const int64_t n_groups = (a.n_w + kRows - 1) / kRows;
  WG* wg = thread_scratch<WG>(static_cast<size_t>(n_groups * nb));
  prep_w(n_groups, wg);
  XT* xt = thread_scratch<XT>(static_cast<size_t>(kMaxNX * nb));
  const auto* x = static_cast<const uint8_t*>(a.x);
  for (int64_t j0 = 0; j0 < a.n_x; j0 += kMaxNX) {
    const int64_t nx = std::min<int64_t>(kMaxNX, a.n_x - j0);
    for (int64_t j = 0; j < nx; ++j) prep_x(x + (j0 + j) * a.x_stride, xt + j * nb);
    for (int64_t g0 = 0; g0 < n_groups; g0 += kGroupsPerTile) {
      const int64_t ng = std::min<int64_t>(kGroupsPerTile, n_groups - g0);
      tile(nx, ng, wg + g0 * nb, xt, j0, g0);
    }
  }
}

// The register-blocked GEMMs' walk (vec_dot_avx2.cpp, vec_dot_avx2_exact.cpp,
// vec_dot_avx2_kquants.cpp): activation rows in tiles of kC, weight rows in tiles of kR, each tile
// one pass over the blocks. A partial tile repeats its last row (computed, never stored): tile(ws,
// xs, nr, nc, ys) stores only y[c][r] for r < nr, c < nc.
template <class WB, class XB, int kR, int kC, class Tile>
void register_tiles(const GemmArgs& a, Tile&& tile) {
  const auto* wbase = static_cast<const uint8_t*>(a.w);
  const auto* xbase = static_cast<const uint8_t*>(a.x);
  for (int64_t c0 = 0; c0 < a.n_x; c0 += kC) {
    const int nc = static_cast<int>(std::min<int64_t>(kC, a.n_x - c0));
    const XB* xs[kC];
    float* ys[kC];
    for (int c = 0; c < kC; ++c) {
      const int64_t cc = c0 + std::min(c, nc - 1);
      xs[c] = reinterpret_cast<const XB*>(xbase + cc * a.x_stride);
      ys[c] = a.y + cc * a.y_stride;
    }
    for (int64_t r0 = 0; r0 < a.n_w; r0 += kR) {
      const int nr = static_cast<int>(std::min<int64_t>(kR, a.n_w - r0));
      const WB* ws[kR];
      for (int r = 0; r < kR; ++r) {
        ws[r] = reinterpret_cast<const WB*>(wbase + (r0 + std::min(r, nr - 1)) * a.w_stride);
      }
      float* yt[kC];
      for (int c = 0; c < kC; ++c) yt[c] = ys[c] + r0;
      tile(ws, xs, nr, nc, yt);
    }
  }
}

// Decode streams every weight once, and a GEMV tile's interleaved rows defeat the hardware
// prefetcher: while a tile of `rows` weight rows computes, the tile `kTilesAhead` later (within
// the call's weights) is asked for, a slice of it per block: step() once per block, nb
// blocks. A small static helper holding only __builtin_prefetch is what GCC 12 deletes:
// its IPA marks it const (the builtin has no side effect to it) and drops every call,
// so the cursor here is state the calls must update, and always_inline keeps it inline.
class TilePrefetch {
 public:
  static constexpr int kTilesAhead = 2;
  [[gnu::always_inline]] TilePrefetch(const GemmArgs& a, const void* tile_row0, int rows,
                                      int64_t nb)
      : base_(static_cast<const uint8_t*>(a.w)) {
    const int64_t tile_bytes = rows * static_cast<int64_t>(a.w_stride);
    const int64_t w_bytes = a.n_w * static_cast<int64_t>(a.w_stride);
    // byte offsets in the call's weights (no pointer is formed past them)
    next_ = std::min(w_bytes,
                     (static_cast<const uint8_t*>(tile_row0) - base_) + kTilesAhead * tile_bytes);
    stop_ = std::min(w_bytes, next_ + tile_bytes);
    // bytes per block, whole lines, so the last block reaches the tile's end
    step_ = ((tile_bytes + nb - 1) / std::max<int64_t>(1, nb) + 63) / 64 * 64;
  }
  [[gnu::always_inline]] void step() {
    const int64_t e = std::min(stop_, next_ + step_);
    for (; next_ < e; next_ += 64) __builtin_prefetch(base_ + next_, 0, 3);
  }

 private:
  const uint8_t* base_;
  int64_t next_ = 0;
  int64_t stop_ = 0;
  int64_t step_ = 0;
};

}  // namespace minfer::backend::cpu
