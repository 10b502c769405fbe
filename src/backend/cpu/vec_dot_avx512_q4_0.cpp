// Stage 12 (kernels): AVX-512 VNNI Q4_0 × Q8_0 with one f32 lane per output row.
// The pair-of-blocks kernels (vec_dot_avx512.cpp) spend three float operations per
// 64 multiply-adds, because every output owns a whole zmm of partial lanes. Here 16
// weight rows share one zmm: each row's exact integer block sum lands in its own lane,
// and the float part — (float(isum) · d_w) · d_x added to the row's accumulator, block
// after block — costs three operations per 16 rows. That expression is the scalar
// reference's (vec_dot_q4_0_q8_0), so this kernel equals it bit for bit on every row.
//  GEMV (one activation row, decode): weights read in place; four rows per zmm (their
//   16 code bytes in the four 128-bit lanes), low and high nibbles dotted against the
//   activation's halves broadcast per lane, then a 4×4 transpose-add puts row r's sum in
//   lane r; the 16 row scales come in one gather. The next group's bytes are
//   prefetched a slice per block (decode streams every weight once).
//  GEMM (a batch, prefill): each call re-lays its weight rows once into per-thread
//   scratch — per 16-row group and block, 8 zmm whose lane r holds row r's codes
//   4j..4j+3 as signed (w − 8) — so one vpdpbusd against a broadcast dword of the
//   activation (stored as x + 128, unsigned) does 64 multiply-adds for 16 rows; the
//   −128·Σ(w − 8) that the unsigned activation adds is the accumulator's start.
// Both forms compute the same exact integers and the same float operations in the same
// order, so prefill equals decode bitwise (invariant 8) without any repacking at load.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;
using quant::kQK;

constexpr int64_t kG = 16;  // weight rows per group = f32 lanes of a zmm
constexpr int64_t kBlockBytes = sizeof(BlockQ4_0);
static_assert(kBlockBytes == 18);

inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

inline int32_t sum_q8(const int8_t* q) {  // Σ of 32 signed bytes, exact
  const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)),
                                     _mm256_set1_epi8(static_cast<char>(0x80)));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());  // 4 × Σ(x + 128)
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

// Lane r of the result: row (base + offs[r]) block's fp16 scale as f32 (one gather).
inline __m512 gather_scales(const uint8_t* base, __m512i offs) {
  const __m512i d32 = _mm512_i32gather_epi32(offs, base, 1);  // d in the low 16 bits
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32));
}

// The float step shared by GEMV and GEMM: acc + (float(isum) · d_w) · d_x.
inline __m512 scale_add(__m512 acc, __m512i isum, __m512 dw, float dx) {
  const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), dw);
  return _mm512_add_ps(acc, _mm512_mul_ps(t, _mm512_set1_ps(dx)));
}

inline __mmask16 row_mask(int64_t nr) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(nr)) - 1u);
}

// Byte offsets (from row 0 of the group) of the group's 16 rows; rows past n_w repeat
// the last row, their lanes are computed and never stored.
inline __m512i group_offsets(int64_t r0, int64_t n_w, uint64_t ws) {
  alignas(64) std::array<int32_t, kG> o{};
  for (int64_t l = 0; l < kG; ++l) {
    o[static_cast<size_t>(l)] = static_cast<int32_t>((std::min(r0 + l, n_w - 1) - r0) * ws);
  }
  return _mm512_load_si512(o.data());
}

// ---- GEMV ----

struct XBlockSum {
  int32_t neg8sum;  // −8 · Σ x over the block
  float d;
};

void gemv(const GemmArgs& a) {
  const int64_t nb = a.k / kQK;
  const auto* xb = static_cast<const BlockQ8_0*>(a.x);
  thread_local std::vector<XBlockSum> xs;  // grown once, per thread
  if (xs.size() < static_cast<size_t>(nb)) xs.resize(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    xs[static_cast<size_t>(b)] = {-8 * sum_q8(xb[b].qs), _cvtsh_ss(xb[b].d)};
  }
  const auto* w = static_cast<const uint8_t*>(a.w);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const int64_t group_bytes = kG * static_cast<int64_t>(a.w_stride);
  // the next group's bytes, a slice per block (whole cache lines, rounded up)
  const int64_t pf_slice = ((group_bytes + nb - 1) / nb + 63) / 64 * 64;
  for (int64_t r0 = 0; r0 < a.n_w; r0 += kG) {
    const int64_t nr = std::min(kG, a.n_w - r0);
    const __m512i offs = group_offsets(r0, a.n_w, a.w_stride);
    alignas(64) std::array<int32_t, kG> ov;
    _mm512_store_si512(ov.data(), offs);
    const uint8_t* g = w + r0 * static_cast<int64_t>(a.w_stride);
    const uint8_t* next = g + group_bytes;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t p = b * pf_slice; p < (b + 1) * pf_slice && p < group_bytes; p += 64) {
        __builtin_prefetch(next + p, 0, 3);
      }
      const int64_t off = b * kBlockBytes;
      const __m512i xlo = _mm512_broadcast_i32x4(load128(xb[b].qs));
      const __m512i xhi = _mm512_broadcast_i32x4(load128(xb[b].qs + 16));
      // s[q]: lane group L (128 bits) holds row 4L + q's four partial sums
      __m512i s[4];
      for (int q = 0; q < 4; ++q) {
        const uint8_t* c = g + off + 2;  // the block's 16 code bytes
        __m512i z = _mm512_castsi128_si512(load128(c + ov[static_cast<size_t>(q)]));
        z = _mm512_inserti32x4(z, load128(c + ov[static_cast<size_t>(4 + q)]), 1);
        z = _mm512_inserti32x4(z, load128(c + ov[static_cast<size_t>(8 + q)]), 2);
        z = _mm512_inserti32x4(z, load128(c + ov[static_cast<size_t>(12 + q)]), 3);
        const __m512i lo = _mm512_and_si512(z, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        s[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
      }
      // 4×4 transpose-add within each 128-bit lane: lane 4L + q = Σ of s[q]'s lane group L
      const __m512i t01 =
          _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
      const __m512i t23 =
          _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
      __m512i isum =
          _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
      isum = _mm512_add_epi32(isum, _mm512_set1_epi32(xs[static_cast<size_t>(b)].neg8sum));
      acc = scale_add(acc, isum, gather_scales(g + off, offs), xs[static_cast<size_t>(b)].d);
    }
    _mm512_mask_storeu_ps(a.y + r0, row_mask(nr), acc);
  }
}

// ---- GEMM ----

struct WGroupBlock {  // 16 rows × one block, re-laid for vpdpbusd
  __m512i q[8];       // lane r: row r's codes 4j..4j+3 minus 8 (s8)
  __m512i start;      // −128 · Σ (w − 8) of row r
  __m512 d;           // row r's scale
};
struct XBlockU {
  uint8_t q[32];  // x + 128
  float d;
};

void prep_weights(const GemmArgs& a, int64_t n_groups, int64_t nb, WGroupBlock* out) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  alignas(64) std::array<uint8_t, kG * kQK> t{};  // [row][element] signed codes
  const __m512i lane_rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(kQK)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    const int64_t r0 = gi * kG;
    const __m512i offs = group_offsets(r0, a.n_w, a.w_stride);
    alignas(64) std::array<int32_t, kG> ov;
    _mm512_store_si512(ov.data(), offs);
    const uint8_t* g = w + r0 * static_cast<int64_t>(a.w_stride);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = g + b * kBlockBytes;
      for (int64_t l = 0; l < kG; ++l) {
        const __m128i c = load128(blk + ov[static_cast<size_t>(l)] + 2);
        const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c, 4), c), m4);
        _mm256_store_si256(reinterpret_cast<__m256i*>(t.data() + l * kQK),
                           _mm256_sub_epi8(u, eight));
      }
      WGroupBlock& o = out[gi * nb + b];
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        o.q[j] = _mm512_i32gather_epi32(lane_rows, t.data() + 4 * j, 1);
        sum = _mm512_dpbusd_epi32(sum, ones, o.q[j]);
      }
      o.start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
      o.d = gather_scales(blk, offs);
    }
  }
}

// NG groups (16 rows each) × NX activation rows over every block.
template <int NG, int NX>
void gemm_tile(int64_t nb, const WGroupBlock* wp, const XBlockU* xp, int64_t x_nb, float* y,
               int64_t ys, int64_t n_rows_left) {
  __m512 acc[NG][NX];
  for (int gi = 0; gi < NG; ++gi)
    for (int j = 0; j < NX; ++j) acc[gi][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[NG][NX];
    for (int gi = 0; gi < NG; ++gi)
      for (int j = 0; j < NX; ++j) isum[gi][j] = wp[gi * nb + b].start;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512i wq[NG];
      for (int gi = 0; gi < NG; ++gi) wq[gi] = wp[gi * nb + b].q[k];
      for (int j = 0; j < NX; ++j) {
        int32_t v;
        std::memcpy(&v, xp[j * x_nb + b].q + 4 * k, 4);
        const __m512i xv = _mm512_set1_epi32(v);
        for (int gi = 0; gi < NG; ++gi) isum[gi][j] = _mm512_dpbusd_epi32(isum[gi][j], xv, wq[gi]);
      }
    }
    for (int gi = 0; gi < NG; ++gi)
      for (int j = 0; j < NX; ++j)
        acc[gi][j] = scale_add(acc[gi][j], isum[gi][j], wp[gi * nb + b].d, xp[j * x_nb + b].d);
  }
  for (int gi = 0; gi < NG; ++gi) {
    const int64_t nr = std::min(kG, n_rows_left - gi * kG);
    for (int j = 0; j < NX; ++j)
      _mm512_mask_storeu_ps(y + j * ys + gi * kG, row_mask(nr), acc[gi][j]);
  }
}

using GemmTileFn = void (*)(int64_t, const WGroupBlock*, const XBlockU*, int64_t, float*, int64_t,
                            int64_t);
constexpr int kMaxNG = 2;
constexpr int kMaxNX = 4;
constexpr std::array<std::array<GemmTileFn, kMaxNX>, kMaxNG> kTiles = {{
    {&gemm_tile<1, 1>, &gemm_tile<1, 2>, &gemm_tile<1, 3>, &gemm_tile<1, 4>},
    {&gemm_tile<2, 1>, &gemm_tile<2, 2>, &gemm_tile<2, 3>, &gemm_tile<2, 4>},
}};

void gemm_batch(const GemmArgs& a) {
  const int64_t nb = a.k / kQK;
  const int64_t n_groups = (a.n_w + kG - 1) / kG;
  thread_local std::vector<WGroupBlock> wscratch;  // grown once, per thread
  if (wscratch.size() < static_cast<size_t>(n_groups * nb)) {
    wscratch.resize(static_cast<size_t>(n_groups * nb));
  }
  prep_weights(a, n_groups, nb, wscratch.data());
  thread_local std::vector<XBlockU> xscratch;
  if (xscratch.size() < static_cast<size_t>(kMaxNX * nb)) {
    xscratch.resize(static_cast<size_t>(kMaxNX * nb));
  }
  const auto* x = static_cast<const uint8_t*>(a.x);
  for (int64_t j0 = 0; j0 < a.n_x; j0 += kMaxNX) {
    const int64_t nx = std::min<int64_t>(kMaxNX, a.n_x - j0);
    for (int64_t j = 0; j < nx; ++j) {
      const auto* row = reinterpret_cast<const BlockQ8_0*>(x + (j0 + j) * a.x_stride);
      for (int64_t b = 0; b < nb; ++b) {
        XBlockU& o = xscratch[static_cast<size_t>(j * nb + b)];
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q),
                            _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))));
        o.d = _cvtsh_ss(row[b].d);
      }
    }
    for (int64_t gi = 0; gi < n_groups; gi += kMaxNG) {
      const int64_t ng = std::min<int64_t>(kMaxNG, n_groups - gi);
      kTiles[static_cast<size_t>(ng - 1)][static_cast<size_t>(nx - 1)](
          nb, wscratch.data() + gi * nb, xscratch.data(), nb, a.y + j0 * a.y_stride + gi * kG,
          a.y_stride, a.n_w - gi * kG);
    }
  }
}

}  // namespace

void gemm_q4_0_avx512(const GemmArgs& a) {
  if (a.n_x == 1) {
    gemv(a);
  } else {
    gemm_batch(a);
  }
}

float vec_dot_q4_0_avx512(int64_t n, const void* w, const void* x) {
  float y = 0.0f;
  gemv(GemmArgs{.k = n,
                .w = w,
                .w_stride = 0,
                .n_w = 1,
                .x = x,
                .x_stride = 0,
                .n_x = 1,
                .y = &y,
                .y_stride = 1});
  return y;
}

}  // namespace minfer::backend::cpu
