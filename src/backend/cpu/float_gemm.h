// Stage 12 (kernels): the drivers of the float-weight (F32 / F16 / BF16) kernels, one
// copy for every ISA: the decode GEMV's row blocking and prefetch, and the prefill GEMM's
// packing and tile walk. An ISA file (vec_dot_float_avx2.cpp, vec_dot_float_avx512.cpp)
// instantiates them with its own kernels K:
//   template <class Fmt, int NW> static void rows(k, w, w_stride, x, y)  NW rows · x
//   template <class Fmt> static void pack(src, stride, n, steps, dst)    rows → f32
//   static void tile(nw, nx, steps, wp, xp, y, ys)                      an nw × nx tile
//   static constexpr int kNW, kNX                                         the largest tile
//   static constexpr bool kWidensX: true where the ISA also has
//   template <class Fmt> static void tile_narrow(...)  the tile on Fmt::T activation rows
//                                                       read in place (no activation packing)
// and its element format Fmt (T, one()). Invariant: every output is the single-row dot's
// (the kernels keep the 16-lane order; the k % 16 tail is fma'd on here in order).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {

// A GEMM tile's partial sums between K blocks: each output's 16 lanes stored as they
// stand ([row][col][16] floats) and reloaded by the next block, so a blocked row's lanes
// see the same fma sequence as an unblocked one. load: start from acc (else zeros);
// store: leave the lanes in acc (else reduce them into y).
struct TileCarry {
  float* acc = nullptr;
  bool load = false;
  bool store = false;
};

// Decode: kRows weight rows at a time; with kPrefetch, the rows 8 ahead asked for.
template <class K, class Fmt, int64_t kRows, bool kPrefetch>
void float_gemv_pass(const GemmArgs& a) {
  constexpr int64_t kAhead = 8;  // rows prefetched ahead of the ones computing
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const typename Fmt::T*>(a.x);
  const auto row_bytes = static_cast<int64_t>(a.k * sizeof(typename Fmt::T));
  int64_t r = 0;
  for (; r + kRows <= a.n_w; r += kRows) {
    if constexpr (kPrefetch) {
      for (int64_t p = r + kAhead; p < std::min(a.n_w, r + kAhead + kRows); ++p) {
        const uint8_t* pr = w + static_cast<uint64_t>(p) * a.w_stride;
        for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(pr + off, 0, 3);
      }
    }
    K::template rows<Fmt, kRows>(a.k, w + static_cast<uint64_t>(r) * a.w_stride, a.w_stride, x,
                                 a.y + r);
  }
  for (; r < a.n_w; ++r) {
    K::template rows<Fmt, 1>(a.k, w + static_cast<uint64_t>(r) * a.w_stride, a.w_stride, x,
                             a.y + r);
  }
}

// Decode. Where the ISA says so (K::kGemvShortRowBytes > 0), rows up to that many bytes go
// one at a time with the rows 8 ahead prefetched (a sequential stream: interleaved short
// rows defeat the hardware prefetcher), longer ones 4 at a time unprefetched (the hardware
// prefetcher follows 4 long streams, and prefetching 8 of them ahead evicts L1); else
// 4 rows at a time, prefetched.
template <class K, class Fmt>
void float_gemv(const GemmArgs& a) {
  const auto row_bytes = static_cast<int64_t>(a.k * sizeof(typename Fmt::T));
  if constexpr (K::kGemvShortRowBytes > 0) {
    if (row_bytes <= K::kGemvShortRowBytes) {
      float_gemv_pass<K, Fmt, 1, true>(a);
    } else {
      float_gemv_pass<K, Fmt, 4, false>(a);
    }
  } else {
    float_gemv_pass<K, Fmt, 4, true>(a);
  }
}

// Prefill: the call's weight rows widened to f32 and packed once, in groups of kNW
// (reused by every tile of activation rows), or, f32 weights (Fmt::kInPlace), read where
// they lie; each tile of kNX activation rows packed once (f32: read in place too) and
// kept in L1 while every weight group of the call passes. A tile reads row r of step s at
// base + s·ss + r·rs (packed: [step][row][16]; in place: the rows themselves).
// 16-element steps per K block: 6 activation rows of a block take 24 KiB of L1.
inline constexpr int64_t kKBlockSteps = 64;

template <class K, class Fmt>
void float_gemm(const GemmArgs& a) {
  if (a.n_x == 1) {
    float_gemv<K, Fmt>(a);
    return;
  }
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int64_t steps = a.k / 16;
  const int64_t body = steps * 16;
  const int64_t group = steps * K::kNW * 16;  // floats per packed weight group
  const int64_t n_groups = (a.n_w + K::kNW - 1) / K::kNW;
  // f32 rows are read in place when every weight row starts on a load's width (K::kLoadBytes);
  // rows off it (a GGUF aligns tensor data to 32 bytes, so each zmm load of a row can
  // straddle two cache lines) are packed as f16 / bf16 rows are: measured faster then,
  // cold and hot.
  // f32 activation rows likewise, on their own (an activation buffer's rows usually are
  // on the line, so a packed weight call still reads them in place).
  auto on_width = [](const void* p, uint64_t stride) {
    return reinterpret_cast<uintptr_t>(p) % K::kLoadBytes == 0 && stride % K::kLoadBytes == 0;
  };
  const bool in_place = Fmt::kInPlace && on_width(a.w, a.w_stride);
  // f16 / bf16 activations: read in place by tiles that widen them (K::kWidensX), else
  // widened once per call into the packed tile.
  constexpr bool kNarrowX = !Fmt::kInPlace && K::kWidensX;
  const bool x_in_place = kNarrowX || (Fmt::kInPlace && on_width(a.x, a.x_stride));
  float* wp = nullptr;
  if (!in_place) {
    wp = thread_scratch<float, 0>(static_cast<size_t>(std::max<int64_t>(1, n_groups * group)));
    for (int64_t g = 0; g < n_groups; ++g) {
      K::template pack<Fmt>(w + static_cast<uint64_t>(g * K::kNW) * a.w_stride, a.w_stride,
                            std::min<int64_t>(K::kNW, a.n_w - g * K::kNW), steps, wp + g * group);
    }
  }
  float* xp = nullptr;
  if (!x_in_place) {
    xp = thread_scratch<float, 1>(static_cast<size_t>(std::max<int64_t>(1, steps * K::kNX * 16)));
  }
  // partial sums of every weight group against the current activation tile (K blocks)
  float* acc = steps > kKBlockSteps
                   ? thread_scratch<float, 2>(static_cast<size_t>(n_groups * K::kNW * K::kNX * 16))
                   : nullptr;
  for (int64_t j0 = 0; j0 < a.n_x; j0 += K::kNX) {
    const int64_t nx = std::min<int64_t>(K::kNX, a.n_x - j0);
    const float* xt = xp;
    int64_t xrs = 16, xss = nx * 16;
    const auto* xn =
        reinterpret_cast<const typename Fmt::T*>(x + static_cast<uint64_t>(j0) * a.x_stride);
    if (kNarrowX) {
      xrs = static_cast<int64_t>(a.x_stride / sizeof(typename Fmt::T));
      xss = 16;
    } else if (x_in_place) {
      xt = reinterpret_cast<const float*>(x + static_cast<uint64_t>(j0) * a.x_stride);
      xrs = static_cast<int64_t>(a.x_stride / sizeof(float));
      xss = 16;
    } else {
      K::template pack<Fmt>(x + static_cast<uint64_t>(j0) * a.x_stride, a.x_stride, nx, steps, xp);
    }
    // Rows longer than kKBlockSteps steps go in K blocks, so the activation tile's block
    // stays in L1 while the weight groups stream past it.
    for (int64_t s0 = 0; s0 < std::max<int64_t>(steps, 1); s0 += kKBlockSteps) {  // k < 16: zeros
      const int64_t ns = std::min(kKBlockSteps, steps - s0);
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t nw = std::min<int64_t>(K::kNW, a.n_w - g * K::kNW);
        float* yt = a.y + j0 * a.y_stride + g * K::kNW;
        const TileCarry carry{.acc = acc != nullptr ? acc + g * K::kNW * K::kNX * 16 : nullptr,
                              .load = s0 > 0,
                              .store = s0 + ns < steps};
        const float* wt = nullptr;  // wp is null where the weights are read in place
        int64_t wrs = 16, wss = nw * 16;
        if (in_place) {
          wt = reinterpret_cast<const float*>(w + static_cast<uint64_t>(g * K::kNW) * a.w_stride) +
               s0 * 16;
          wrs = static_cast<int64_t>(a.w_stride / sizeof(float));
          wss = 16;
        } else {
          wt = wp + g * group + s0 * nw * 16;
        }
        if constexpr (kNarrowX) {
          K::template tile_narrow<Fmt>(nw, nx, ns, wt, wrs, wss, xn + s0 * xss, xrs, xss, yt,
                                       a.y_stride, carry);
        } else {
          K::tile(nw, nx, ns, wt, wrs, wss, xt + s0 * xss, xrs, xss, yt, a.y_stride, carry);
        }
      }
    }
    if (body == a.k) continue;
    for (int64_t j = j0; j < j0 + nx; ++j) {  // the k % 16 tail, fma'd on in order
      const auto* xr =
          reinterpret_cast<const typename Fmt::T*>(x + static_cast<uint64_t>(j) * a.x_stride);
      for (int64_t r = 0; r < a.n_w; ++r) {
        const auto* wr =
            reinterpret_cast<const typename Fmt::T*>(w + static_cast<uint64_t>(r) * a.w_stride);
        float s = a.y[j * a.y_stride + r];
        for (int64_t i = body; i < a.k; ++i) s = std::fma(Fmt::one(wr[i]), Fmt::one(xr[i]), s);
        a.y[j * a.y_stride + r] = s;
      }
    }
  }
}

}  // namespace minfer::backend::cpu
