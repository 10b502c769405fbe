// Stage 12 (kernels): AVX-512 VNNI Q4_K / Q5_K · Q8_K, one f32 lane per weight row, the
// K-quant form of vec_dot_avx512_rows.cpp. The scalar reference adds, per super-block,
// d·float(Σ_j sc_j·Σ q·y) − dmin·float(Σ_j m_j·bsum_j) (vec_dot_kquants.cpp); the
// integers are exact, so any method gives them, and the float expression is per row.
//  GEMV (decode): the AVX2 twin per row (exact integers through vpmaddubsw / vpmaddwd),
//   four rows ahead prefetched.
//  GEMM (prefill): each call re-lays its weight rows into per-thread scratch — per
//   16-row group and super-block, 64 zmm whose lane r holds row r's codes 4k..4k+3
//   (u8: 0..15, Q5_K 0..31), the sub-block scales as int32 lanes, the mins as int16 pairs, d and
//   dmin — so one vpdpbusd against a broadcast activation dword does 64 multiply-adds for 16 rows,
//   a vpmulld per sub-block applies the scales, and four vpdpwssd give Σ m·bsum.
// Both forms compute the same integers and the scalar's float expression, so prefill
// equals decode bitwise (invariant 8) and both equal the scalar reference.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ8_K;
using quant::kQKK;

constexpr int64_t kG = 16;  // weight rows per group = lanes of a zmm

inline __mmask16 row_mask(int64_t nr) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(nr)) - 1u);
}

// Per format: the block, its AVX2 twin (the GEMV row), and its 256 codes in element order.
struct Q4_KSuper {
  using WB = BlockQ4_K;
  static float dot(int64_t n, const void* w, const void* x) { return avx2_dot_q4_k_q8_k(n, w, x); }
  static void codes(const WB& b, uint8_t* out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {  // element 64c + 32h + l: nibble h of qs[32c + l]
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * c), _mm256_and_si256(q, m4));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * c + 32),
                         _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
  }
};
struct Q5_KSuper {
  using WB = BlockQ5_K;
  static float dot(int64_t n, const void* w, const void* x) { return avx2_dot_q5_k_q8_k(n, w, x); }
  static void codes(const WB& b, uint8_t* out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m1 = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    for (int c = 0; c < 4; ++c) {  // ... with bit 2c + h of qh[l] as bit 4
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      for (int h = 0; h < 2; ++h) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 4 * h), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + h), m1);
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * c + 32 * h),
                           _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
      }
    }
  }
};

// ---- GEMV ----

template <class F>
void gemv(const GemmArgs& a) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  const int64_t ws = static_cast<int64_t>(a.w_stride);
  constexpr int64_t kAhead = 4;  // rows prefetched ahead of the one computing
  for (int64_t r = 0; r < a.n_w; ++r) {
    if (r + kAhead < a.n_w) {
      const uint8_t* p = w + (r + kAhead) * ws;
      for (int64_t off = 0; off < ws; off += 64) __builtin_prefetch(p + off, 0, 3);
    }
    a.y[r] = F::dot(a.k, w + r * ws, a.x);
  }
}

// ---- GEMM ----

struct WGroupSuper {  // 16 rows × one super-block
  __m512i q[64];      // lane r: row r's codes 4k..4k+3 (u8, 0..15)
  __m512i sc[8];      // lane r: row r's scale of sub-block j
  __m512i m[4];       // lane r: row r's mins of sub-blocks 2t, 2t+1 as int16 pair
  __m512 d, dmin;     // lane r: row r's d and dmin
};
struct XSuper {
  int32_t bs[4];  // int16 pair (bsum of sub-block 2t, of 2t + 1), sub-block = 32 elements
  float d;
};

template <class F>
void prep_weights(const GemmArgs& a, int64_t n_groups, int64_t nb, WGroupSuper* out) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  alignas(64) std::array<uint8_t, kG * kQKK> t{};  // [row][element] codes
  const __m512i lane_rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(kQKK)));
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    for (int64_t b = 0; b < nb; ++b) {
      WGroupSuper& o = out[gi * nb + b];
      alignas(64) std::array<int32_t, kG * 8> sc{};  // [j][row]
      alignas(64) std::array<int32_t, kG * 4> mp{};  // [t][row]
      alignas(64) std::array<float, kG> dv{}, dmv{};
      for (int64_t l = 0; l < kG; ++l) {
        const int64_t row = std::min(gi * kG + l, a.n_w - 1);  // past n_w: never stored
        const auto& blk = reinterpret_cast<const typename F::WB*>(w + row * a.w_stride)[b];
        F::codes(blk, t.data() + l * kQKK);
        uint8_t sm[16];  // sc[0..7], m[0..7]
        kquant_scales_mins(blk.scales, sm);
        for (int j = 0; j < 8; ++j) sc[static_cast<size_t>(j * kG + l)] = sm[j];
        for (int u = 0; u < 4; ++u) {
          mp[static_cast<size_t>(u * kG + l)] =
              static_cast<int32_t>(static_cast<uint32_t>(sm[8 + 2 * u]) |
                                   (static_cast<uint32_t>(sm[8 + 2 * u + 1]) << 16));
        }
        dv[static_cast<size_t>(l)] = _cvtsh_ss(blk.d);
        dmv[static_cast<size_t>(l)] = _cvtsh_ss(blk.dmin);
      }
      for (int k = 0; k < 64; ++k) o.q[k] = _mm512_i32gather_epi32(lane_rows, t.data() + 4 * k, 1);
      for (int j = 0; j < 8; ++j) o.sc[j] = _mm512_load_si512(sc.data() + j * kG);
      for (int u = 0; u < 4; ++u) o.m[u] = _mm512_load_si512(mp.data() + u * kG);
      o.d = _mm512_load_ps(dv.data());
      o.dmin = _mm512_load_ps(dmv.data());
    }
  }
}

// One 16-row group × NX activation rows over every super-block.
template <int NX>
void gemm_tile(int64_t nb, const WGroupSuper* wp, const uint8_t* x, uint64_t xs, const XSuper* xp,
               float* y, int64_t ys, int64_t nr) {
  __m512 acc[NX];
  for (int j = 0; j < NX; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const WGroupSuper& wb = wp[b];
    const int8_t* xq[NX];
    for (int j = 0; j < NX; ++j) {
      xq[j] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<uint64_t>(j) * xs)[b].qs;
    }
    __m512i total[NX];
    for (int j = 0; j < NX; ++j) total[j] = _mm512_setzero_si512();
    for (int sb = 0; sb < 8; ++sb) {
      __m512i isub[NX];
      for (int j = 0; j < NX; ++j) isub[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i wq = wb.q[8 * sb + k];
        for (int j = 0; j < NX; ++j) {
          int32_t v;
          std::memcpy(&v, xq[j] + 32 * sb + 4 * k, 4);
          isub[j] = _mm512_dpbusd_epi32(isub[j], wq, _mm512_set1_epi32(v));
        }
      }
      for (int j = 0; j < NX; ++j) {
        total[j] = _mm512_add_epi32(total[j], _mm512_mullo_epi32(isub[j], wb.sc[sb]));
      }
    }
    for (int j = 0; j < NX; ++j) {
      const XSuper& xv = xp[j * nb + b];
      __m512i summ = _mm512_setzero_si512();
      for (int u = 0; u < 4; ++u)
        summ = _mm512_dpwssd_epi32(summ, wb.m[u], _mm512_set1_epi32(xv.bs[u]));
      // sumf += d·float(sumi) − dmin·float(summ), d = x.d·d_w, dmin = x.d·dmin_w
      const __m512 xd = _mm512_set1_ps(xv.d);
      const __m512 t =
          _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(xd, wb.d), _mm512_cvtepi32_ps(total[j])),
                        _mm512_mul_ps(_mm512_mul_ps(xd, wb.dmin), _mm512_cvtepi32_ps(summ)));
      acc[j] = _mm512_add_ps(acc[j], t);
    }
  }
  for (int j = 0; j < NX; ++j) _mm512_mask_storeu_ps(y + j * ys, row_mask(nr), acc[j]);
}

using GemmTileFn = void (*)(int64_t, const WGroupSuper*, const uint8_t*, uint64_t, const XSuper*,
                            float*, int64_t, int64_t);
constexpr int kMaxNX = 4;
constexpr std::array<GemmTileFn, kMaxNX> kTiles = {&gemm_tile<1>, &gemm_tile<2>, &gemm_tile<3>,
                                                   &gemm_tile<4>};

template <class F>
void gemm_batch(const GemmArgs& a) {
  const int64_t nb = a.k / kQKK;
  const int64_t n_groups = (a.n_w + kG - 1) / kG;
  thread_local std::vector<WGroupSuper> wscratch;  // grown once, per thread (prefill only)
  if (wscratch.size() < static_cast<size_t>(n_groups * nb)) {
    wscratch.resize(static_cast<size_t>(n_groups * nb));
  }
  prep_weights<F>(a, n_groups, nb, wscratch.data());
  thread_local std::vector<XSuper> xscratch;
  if (xscratch.size() < static_cast<size_t>(kMaxNX * nb)) {
    xscratch.resize(static_cast<size_t>(kMaxNX * nb));
  }
  const auto* x = static_cast<const uint8_t*>(a.x);
  for (int64_t j0 = 0; j0 < a.n_x; j0 += kMaxNX) {
    const int64_t nx = std::min<int64_t>(kMaxNX, a.n_x - j0);
    for (int64_t j = 0; j < nx; ++j) {
      const auto* row = reinterpret_cast<const BlockQ8_K*>(x + (j0 + j) * a.x_stride);
      for (int64_t b = 0; b < nb; ++b) {
        XSuper& o = xscratch[static_cast<size_t>(j * nb + b)];
        for (int u = 0; u < 4; ++u) {
          const int32_t lo = row[b].bsums[4 * u] + row[b].bsums[4 * u + 1];
          const int32_t hi = row[b].bsums[4 * u + 2] + row[b].bsums[4 * u + 3];
          o.bs[u] = static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xFFFFu) |
                                         (static_cast<uint32_t>(hi) << 16));
        }
        o.d = row[b].d;
      }
    }
    for (int64_t gi = 0; gi < n_groups; ++gi) {
      kTiles[static_cast<size_t>(nx - 1)](
          nb, wscratch.data() + gi * nb, x + j0 * a.x_stride, a.x_stride, xscratch.data(),
          a.y + j0 * a.y_stride + gi * kG, a.y_stride, std::min(kG, a.n_w - gi * kG));
    }
  }
}

template <class F>
void gemm(const GemmArgs& a) {
  if (a.n_x == 1) {
    gemv<F>(a);
  } else {
    gemm_batch<F>(a);
  }
}

}  // namespace

DotKernel avx512_kquant_dot_kernel(DType t) {
  switch (t) {
    case DType::kQ4_K:
      return {DType::kQ8_K, from_f32_q8_k, avx2_dot_q4_k_q8_k, gemm<Q4_KSuper>};
    case DType::kQ5_K:
      return {DType::kQ8_K, from_f32_q8_k, avx2_dot_q5_k_q8_k, gemm<Q5_KSuper>};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
