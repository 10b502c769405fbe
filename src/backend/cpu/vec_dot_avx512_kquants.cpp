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

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_K;
using quant::kQKK;

constexpr int64_t kG = 16;  // weight rows per group = lanes of a zmm

inline __mmask16 row_mask(int64_t nr) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(nr)) - 1u);
}

// Per format: the block, its AVX2 twin (the GEMV row), and its 256 codes in element order.
struct Q4_KSuper {
  using WB = BlockQ4_K;
  static float dot(int64_t n, const void* w, const void* x) { return dot_q4_k_q8_k_avx2(n, w, x); }
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
  static float dot(int64_t n, const void* w, const void* x) { return dot_q5_k_q8_k_avx2(n, w, x); }
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
  gemm_groups<WGroupSuper, XSuper, kMaxNX, 1>(
      a, nb, [&](int64_t n_groups, WGroupSuper* out) { prep_weights<F>(a, n_groups, nb, out); },
      [&](const uint8_t* xrow, XSuper* out) {
        const auto* row = reinterpret_cast<const BlockQ8_K*>(xrow);
        for (int64_t b = 0; b < nb; ++b) {
          for (int u = 0; u < 4; ++u) {
            const int32_t lo = row[b].bsums[4 * u] + row[b].bsums[4 * u + 1];
            const int32_t hi = row[b].bsums[4 * u + 2] + row[b].bsums[4 * u + 3];
            out[b].bs[u] = static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xFFFFu) |
                                                (static_cast<uint32_t>(hi) << 16));
          }
          out[b].d = row[b].d;
        }
      },
      [&](int64_t nx, int64_t, const WGroupSuper* wg, const XSuper* xt, int64_t j0, int64_t g0) {
        kTiles[static_cast<size_t>(nx - 1)](
            nb, wg, static_cast<const uint8_t*>(a.x) + j0 * a.x_stride, a.x_stride, xt,
            a.y + j0 * a.y_stride + g0 * kG, a.y_stride, std::min(kG, a.n_w - g0 * kG));
      });
}

// ---- Q6_K GEMM in ggml's x86 lane order ----
// The scalar reference (and the GEMV, Q6_KFmt in vec_dot_avx512.cpp) keeps 8 f32 lanes
// per row: lane l += d · float(Σ over the 8 chunks of 32 of sc · (codes 4l..4l+3 · y)
// − 32 · (bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1])), reduced ((0+4)+(2+6))+((1+5)+(3+7))
// at the end. Here lane l of 16 rows is one zmm: the codes come pre-scaled (code · sc
// fits int16) as int16 pairs, so vpdpwssd against a broadcast pair of activations adds
// two products per row, exact; the same integers, fmas and final tree as the GEMV.
struct WGroupQ6 {
  __m512i q[8][8][2];  // [chunk v][lane l][pair p]: row r's code·sc of elements 32v+4l+2p, +1
  __m512i scp[8];      // lane l: row r's (sc[2l], sc[2l+1]) as an int16 pair
  __m512 d;
};
struct XQ6 {
  int16_t y[kQKK];  // the activation widened to int16 (pairs for vpdpwssd)
};

void prep_weights_q6(const GemmArgs& a, int64_t n_groups, int64_t nb, WGroupQ6* out) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  alignas(64) std::array<int16_t, kG * kQKK> t{};  // [row][element] code · scale
  const __m512i lane_rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(kQKK * 2)));
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    for (int64_t b = 0; b < nb; ++b) {
      WGroupQ6& o = out[gi * nb + b];
      alignas(64) std::array<int32_t, kG * 8> scp{};  // [l][row]
      alignas(64) std::array<float, kG> dv{};
      for (int64_t r = 0; r < kG; ++r) {
        const int64_t row = std::min(gi * kG + r, a.n_w - 1);  // past n_w: never stored
        const auto& blk = reinterpret_cast<const BlockQ6_K*>(w + row * a.w_stride)[b];
        int16_t* dst = t.data() + r * kQKK;
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = blk.ql + 64 * h;
          const uint8_t* qh = blk.qh + 32 * h;
          for (int l = 0; l < 32; ++l) {
            const int e = 128 * h + l;
            const int c0 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
            const int c1 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
            const int c2 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            const int c3 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            dst[e] = static_cast<int16_t>(c0 * blk.scales[e / 16]);
            dst[e + 32] = static_cast<int16_t>(c1 * blk.scales[(e + 32) / 16]);
            dst[e + 64] = static_cast<int16_t>(c2 * blk.scales[(e + 64) / 16]);
            dst[e + 96] = static_cast<int16_t>(c3 * blk.scales[(e + 96) / 16]);
          }
        }
        for (int l = 0; l < 8; ++l) {
          scp[static_cast<size_t>(l * kG + r)] = static_cast<int32_t>(
              static_cast<uint32_t>(static_cast<uint16_t>(blk.scales[2 * l])) |
              (static_cast<uint32_t>(static_cast<uint16_t>(blk.scales[2 * l + 1])) << 16));
        }
        dv[static_cast<size_t>(r)] = _cvtsh_ss(blk.d);
      }
      for (int v = 0; v < 8; ++v) {
        for (int l = 0; l < 8; ++l) {
          for (int p = 0; p < 2; ++p) {
            o.q[v][l][p] = _mm512_i32gather_epi32(lane_rows, t.data() + 32 * v + 4 * l + 2 * p, 1);
          }
        }
      }
      for (int l = 0; l < 8; ++l) o.scp[l] = _mm512_load_si512(scp.data() + l * kG);
      o.d = _mm512_load_ps(dv.data());
    }
  }
}

// One 16-row group × NX activation rows; the 8 lane accumulators of each live in memory
// between super-blocks (an exact f32 store and load).
template <int NX>
void gemm_tile_q6(int64_t nb, const WGroupQ6* wp, const uint8_t* x, uint64_t xs, const XQ6* xp,
                  float* y, int64_t ys, int64_t nr) {
  __m512 acc[NX][8];
  for (int j = 0; j < NX; ++j)
    for (int l = 0; l < 8; ++l) acc[j][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const WGroupQ6& wb = wp[b];
    __m512 dj[NX];
    const BlockQ8_K* xb[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<uint64_t>(j) * xs) + b;
      dj[j] = _mm512_mul_ps(_mm512_set1_ps(xb[j]->d), wb.d);  // d = x.d · d_w
    }
    for (int l = 0; l < 8; ++l) {
      __m512i lane[NX];
      for (int j = 0; j < NX; ++j) {
        int32_t bs;  // (bsums[2l], bsums[2l+1])
        std::memcpy(&bs, xb[j]->bsums + 2 * l, 4);
        const __m512i corr =
            _mm512_dpwssd_epi32(_mm512_setzero_si512(), wb.scp[l], _mm512_set1_epi32(bs));
        lane[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(corr, 5));
      }
      for (int v = 0; v < 8; ++v) {
        for (int p = 0; p < 2; ++p) {
          const __m512i wq = wb.q[v][l][p];
          for (int j = 0; j < NX; ++j) {
            int32_t pair;
            std::memcpy(&pair, xp[j * nb + b].y + 32 * v + 4 * l + 2 * p, 4);
            lane[j] = _mm512_dpwssd_epi32(lane[j], wq, _mm512_set1_epi32(pair));
          }
        }
      }
      for (int j = 0; j < NX; ++j) {
        acc[j][l] = _mm512_fmadd_ps(dj[j], _mm512_cvtepi32_ps(lane[j]), acc[j][l]);
      }
    }
  }
  for (int j = 0; j < NX; ++j) {
    const __m512 s = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][4]), _mm512_add_ps(acc[j][2], acc[j][6])),
        _mm512_add_ps(_mm512_add_ps(acc[j][1], acc[j][5]), _mm512_add_ps(acc[j][3], acc[j][7])));
    _mm512_mask_storeu_ps(y + j * ys, row_mask(nr), s);
  }
}

using GemmTileQ6Fn = void (*)(int64_t, const WGroupQ6*, const uint8_t*, uint64_t, const XQ6*,
                              float*, int64_t, int64_t);
constexpr std::array<GemmTileQ6Fn, kMaxNX> kTilesQ6 = {&gemm_tile_q6<1>, &gemm_tile_q6<2>,
                                                       &gemm_tile_q6<3>, &gemm_tile_q6<4>};

template <class F>
void gemm(const GemmArgs& a) {
  if (a.n_x == 1) {
    gemv<F>(a);
  } else {
    gemm_batch<F>(a);
  }
}

}  // namespace

void gemm_q6_k_q8_k_rows_avx512(const GemmArgs& a) {
  const int64_t nb = a.k / kQKK;
  gemm_groups<WGroupQ6, XQ6, kMaxNX, 1>(
      a, nb, [&](int64_t n_groups, WGroupQ6* out) { prep_weights_q6(a, n_groups, nb, out); },
      [&](const uint8_t* xrow, XQ6* out) {
        const auto* row = reinterpret_cast<const BlockQ8_K*>(xrow);
        for (int64_t b = 0; b < nb; ++b) {
          for (int c = 0; c < kQKK; c += 16) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].y + c),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(row[b].qs + c))));
          }
        }
      },
      [&](int64_t nx, int64_t, const WGroupQ6* wg, const XQ6* xt, int64_t j0, int64_t g0) {
        kTilesQ6[static_cast<size_t>(nx - 1)](
            nb, wg, static_cast<const uint8_t*>(a.x) + j0 * a.x_stride, a.x_stride, xt,
            a.y + j0 * a.y_stride + g0 * kG, a.y_stride, std::min(kG, a.n_w - g0 * kG));
      });
}

IsaDot avx512_kquant_dot(DType t) {
  switch (t) {
    case DType::kQ4_K:
      return {dot_q4_k_q8_k_avx2, gemm<Q4_KSuper>};
    case DType::kQ5_K:
      return {dot_q5_k_q8_k_avx2, gemm<Q5_KSuper>};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
