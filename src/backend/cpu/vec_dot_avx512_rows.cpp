// Stage 12 (kernels): AVX-512 VNNI Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0, one f32 lane per row.
// A kernel that gives every output a zmm of partial lanes (two blocks per register)
// spends three float operations per 64 multiply-adds. Here 16 weight rows share one
// zmm: each row's exact integer block sum lands in its own lane, and the float part —
// the scalar reference's expression for the type (vec_dot_scalar.cpp), added to the
// row's accumulator block after block — costs three to five operations per 16 rows.
// So these kernels equal the scalar reference bit for bit on every row.
//  GEMV (one activation row, decode): weights read in place; four rows per zmm (16 code
//   bytes each in the four 128-bit lanes: the low and high nibbles — Q5_0's / Q5_1's fifth bits
//   added under a byte mask tested out of its qh — or the two halves of a Q8_0 block),
//   dotted against the activation's matching 16 bytes broadcast per lane,
//   then a 4×4 transpose-add puts row r's sum in lane r; the 16 row scales (and mins)
//   come in one gather. The next group's bytes are prefetched into L2 a slice per block
//   (decode streams every weight once).
//  GEMM (a batch, prefill): each call re-lays its weight rows once into per-thread
//   scratch — per 16-row group and block, 8 zmm whose lane r holds row r's codes
//   4j..4j+3 as signed bytes — so one vpdpbusd against a broadcast dword of the
//   activation (stored as x + 128, unsigned) does 64 multiply-adds for 16 rows; the
//   −128·Σw that the unsigned activation adds is the accumulator's start.
// Both forms compute the same exact integers and the same float operations in the same
// order, so prefill equals decode bitwise (invariant 8), without repacking at load.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/x86_simd.h"

namespace minfer::backend::cpu {
namespace {

using x86::h2f;

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ8_0;
using quant::kQK;

constexpr int64_t kG = 16;  // weight rows per group = f32 lanes of a zmm

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

// 16 packed bytes → 32 codes in element order: low nibbles, then high nibbles.
inline __m256i nibbles32(const uint8_t* p) {
  const __m128i c = load128(p);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c, 4), c), _mm256_set1_epi8(0x0F));
}
// A Q5 block's 32 codes (0..31): the nibbles with bit j of qh as element j's bit 4.
inline __m256i q5_codes32(const uint8_t* qs, const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i u = nibbles32(qs);
  return _mm256_mask_add_epi8(u, static_cast<__mmask32>(qh), u, _mm256_set1_epi8(16));
}
inline void store32(int8_t* q, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v);
}

// ---- per-format policies ----
// kCodes: offset of the code bytes in a weight block. Nibbles: 16 bytes, element j in
// the low nibble of byte j, j + 16 in the high one; else 32 signed bytes (Q8_0).
// kGemvOffset: the GEMV dots the codes as unsigned bytes w + kGemvOffset (Q8_0 flips
// the sign bit), so the activation side subtracts kGemvOffset·Σx per block.
// kHighBit: Q5_0's bit 4 of element j is bit j of the block's qh.
// decode: the block's 32 codes as the GEMM's signed bytes (what the scalar dot
// multiplies), element order.
// step: the scalar reference's float expression, one lane per row.

struct Q4_0Rows {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr int64_t kCodes = 2;
  static constexpr bool kNibbles = true;
  static constexpr bool kHighBit = false;
  static constexpr bool kHasMin = false;
  static constexpr int32_t kGemvOffset = 8;
  static void decode(const WB& b, int8_t* q) {
    store32(q, _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8)));
  }
  // sumf += float(sumi) · d_w · d_x
  static __m512 step(__m512 acc, __m512i isum, __m512 dw, __m512, float dx, float) {
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), dw);
    return _mm512_add_ps(acc, _mm512_mul_ps(t, _mm512_set1_ps(dx)));
  }
};

// llama.cpp's repacked Q4_0 (its q4_0_8x8 GEMV / GEMM, vec_dot_repack.cpp): the same codes,
// sumf = fma(float(sumi), d_w · d_x, sumf).
struct Q4_0RepackRows : Q4_0Rows {
  static __m512 step(__m512 acc, __m512i isum, __m512 dw, __m512, float dx, float) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc);
  }
};

struct Q4_1Rows {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr int64_t kCodes = 4;
  static constexpr bool kNibbles = true;
  static constexpr bool kHighBit = false;
  static constexpr bool kHasMin = true;
  static constexpr int32_t kGemvOffset = 0;
  static void decode(const WB& b, int8_t* q) { store32(q, nibbles32(b.qs)); }
  // sumf += (d_w · d_x) · float(sumi) + m_w · s_x
  static __m512 step(__m512 acc, __m512i isum, __m512 dw, __m512 mw, float dx, float sx) {
    const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(isum));
    return _mm512_add_ps(acc, _mm512_add_ps(t, _mm512_mul_ps(mw, _mm512_set1_ps(sx))));
  }
};

struct Q8_0Rows {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr int64_t kCodes = 2;
  static constexpr bool kNibbles = false;
  static constexpr bool kHighBit = false;
  static constexpr bool kHasMin = false;
  static constexpr int32_t kGemvOffset = 128;
  static void decode(const WB& b, int8_t* q) { std::memcpy(q, b.qs, kQK); }
  // sumf += float(sumi) · (d_w · d_x)
  static __m512 step(__m512 acc, __m512i isum, __m512 dw, __m512, float dx, float) {
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(dx)));
    return _mm512_add_ps(acc, t);
  }
};

struct Q5_0Rows {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr int64_t kCodes = 6;
  static constexpr int64_t kHighBits = 2;  // offset of qh
  static constexpr bool kNibbles = true;
  static constexpr bool kHighBit = true;
  static constexpr bool kHasMin = false;
  static constexpr int32_t kGemvOffset = 16;
  static void decode(const WB& b, int8_t* q) {
    store32(q, _mm256_sub_epi8(q5_codes32(b.qs, b.qh), _mm256_set1_epi8(16)));
  }
  // sumf += (d_w · d_x) · float(sumi)
  static __m512 step(__m512 acc, __m512i isum, __m512 dw, __m512, float dx, float) {
    const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(isum));
    return _mm512_add_ps(acc, t);
  }
};

struct Q5_1Rows {
  using WB = BlockQ5_1;
  using XB = BlockQ8_1;
  static constexpr int64_t kCodes = 8;
  static constexpr int64_t kHighBits = 4;  // offset of qh
  static constexpr bool kNibbles = true;
  static constexpr bool kHighBit = true;
  static constexpr bool kHasMin = true;
  static constexpr int32_t kGemvOffset = 0;
  static void decode(const WB& b, int8_t* q) { store32(q, q5_codes32(b.qs, b.qh)); }
  static __m512 step(__m512 acc, __m512i isum, __m512 dw, __m512 mw, float dx, float sx) {
    return Q4_1Rows::step(acc, isum, dw, mw, dx, sx);  // the same scalar expression
  }
};

template <class F>
constexpr int64_t kBlockBytes = static_cast<int64_t>(sizeof(typename F::WB));

inline float x_sum_scale(const BlockQ8_0&) {
  return 0.0f;
}
inline float x_sum_scale(const BlockQ8_1& b) {
  return h2f(b.s);
}

// The 16 rows' scale (and min) of one block as f32 lanes, one gather: the block's first
// dword is d (and m) as fp16.
struct RowScales {
  __m512 d, m;
};
template <class F>
inline RowScales gather_scales(const uint8_t* base, __m512i offs) {
  const __m512i dm = _mm512_i32gather_epi32(offs, base, 1);
  RowScales s;
  s.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
  s.m = F::kHasMin ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)))
                   : _mm512_setzero_ps();
  return s;
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
  int32_t corr;  // −kGemvOffset · Σ x over the block
  float d, s;
};

// NX activation rows (1..kMaxGemvRows) against the same weights: each block's codes
// are unpacked once and dotted with every row, so a small decode batch reads and
// decodes the weights once. Per (weight row, activation row) the integer sums and the
// float steps are exactly the single-row ones: bitwise the GEMV of each row alone.
constexpr int kMaxGemvRows = 8;

template <class F, int NX>
void gemv(const GemmArgs& a) {
  using XB = typename F::XB;
  const int64_t nb = a.k / kQK;
  std::array<const XB*, NX> xb;
  for (int j = 0; j < NX; ++j) {
    xb[static_cast<size_t>(j)] =
        reinterpret_cast<const XB*>(static_cast<const uint8_t*>(a.x) + j * a.x_stride);
  }
  const auto* w = static_cast<const uint8_t*>(a.w);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // Q5_0 high bits: dword lanes of the 4 rows of quad q, the qh byte of each element,
  // and the bit within it
  const __m512i quad_idx[4] = {
      _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12),
      _mm512_setr_epi32(1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 13, 13, 13, 13),
      _mm512_setr_epi32(2, 2, 2, 2, 6, 6, 6, 6, 10, 10, 10, 10, 14, 14, 14, 14),
      _mm512_setr_epi32(3, 3, 3, 3, 7, 7, 7, 7, 11, 11, 11, 11, 15, 15, 15, 15)};
  const __m512i sel_lo =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m512i sel_hi =
      _mm512_broadcast_i32x4(_mm_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m512i bit = _mm512_broadcast_i32x4(
      _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128));
  const int64_t group_bytes = kG * static_cast<int64_t>(a.w_stride);
  // the next group's bytes, a slice per block (whole cache lines, rounded up)
  const int64_t pf_slice = ((group_bytes + nb - 1) / nb + 63) / 64 * 64;
  // The activations' per-block sums, a segment of blocks at a time on the stack (the
  // decode step allocates nothing); a row's accumulator crosses segments through y
  // (an exact f32 store and load), so the float operations are the same.
  constexpr int64_t kSeg = 512;
  std::array<std::array<XBlockSum, kSeg>, NX> xs;
  for (int64_t s0 = 0; s0 < nb; s0 += kSeg) {
    const int64_t s1 = std::min(nb, s0 + kSeg);
    for (int j = 0; j < NX; ++j) {
      const XB* x = xb[static_cast<size_t>(j)];
      for (int64_t b = s0; b < s1; ++b) {
        xs[static_cast<size_t>(j)][static_cast<size_t>(b - s0)] = {
            F::kGemvOffset == 0 ? 0 : -F::kGemvOffset * sum_q8(x[b].qs), h2f(x[b].d),
            x_sum_scale(x[b])};
      }
    }
    for (int64_t r0 = 0; r0 < a.n_w; r0 += kG) {
      const int64_t nr = std::min(kG, a.n_w - r0);
      const __m512i offs = group_offsets(r0, a.n_w, a.w_stride);
      alignas(64) std::array<int32_t, kG> ov;
      _mm512_store_si512(ov.data(), offs);
      const uint8_t* g = w + r0 * static_cast<int64_t>(a.w_stride);
      const uint8_t* next = g + group_bytes;
      __m512 acc[NX];
      for (int j = 0; j < NX; ++j) {
        acc[j] = s0 == 0 ? _mm512_setzero_ps()
                         : _mm512_maskz_loadu_ps(row_mask(nr), a.y + j * a.y_stride + r0);
      }
      for (int64_t b = s0; b < s1; ++b) {
        // Into L2 (prefetcht1), not L1: on the Intel Xeon a prefetch to L1 holds one of the
        // core's few L1 fill buffers until DRAM answers, and perf put ~40% of this kernel's
        // samples on the stalled prefetch; the 0.5B Q8_0 decode went 32.6 -> 37.0 tok/s.
        for (int64_t p = b * pf_slice; p < (b + 1) * pf_slice && p < group_bytes; p += 64) {
          __builtin_prefetch(next + p, 0, 2);
        }
        const uint8_t* blk = g + b * kBlockBytes<F>;
        // lo[q] / hi[q]: 128-bit lane L holds row 4L + q's 16 + 16 codes
        [[maybe_unused]] __m512i qh = _mm512_setzero_si512();
        if constexpr (F::kHighBit) qh = _mm512_i32gather_epi32(offs, blk + F::kHighBits, 1);
        __m512i lo[4], hi[4];
        for (int q = 0; q < 4; ++q) {
          const uint8_t* c0 = blk + F::kCodes + ov[static_cast<size_t>(q)];
          const uint8_t* c1 = blk + F::kCodes + ov[static_cast<size_t>(4 + q)];
          const uint8_t* c2 = blk + F::kCodes + ov[static_cast<size_t>(8 + q)];
          const uint8_t* c3 = blk + F::kCodes + ov[static_cast<size_t>(12 + q)];
          auto four = [&](int64_t o) {
            __m512i z = _mm512_castsi128_si512(load128(c0 + o));
            z = _mm512_inserti32x4(z, load128(c1 + o), 1);
            z = _mm512_inserti32x4(z, load128(c2 + o), 2);
            return _mm512_inserti32x4(z, load128(c3 + o), 3);
          };
          if constexpr (F::kNibbles) {
            const __m512i z = four(0);
            lo[q] = _mm512_and_si512(z, m4);
            hi[q] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
            if constexpr (F::kHighBit) {
              // lane group L: row 4L + q's qh; byte j tests bit j (lo) or 16 + j (hi)
              const __m512i h = _mm512_permutexvar_epi32(quad_idx[q], qh);
              const __m512i sixteen = _mm512_set1_epi8(16);
              lo[q] = _mm512_mask_add_epi8(
                  lo[q], _mm512_test_epi8_mask(_mm512_shuffle_epi8(h, sel_lo), bit), lo[q],
                  sixteen);
              hi[q] = _mm512_mask_add_epi8(
                  hi[q], _mm512_test_epi8_mask(_mm512_shuffle_epi8(h, sel_hi), bit), hi[q],
                  sixteen);
            }
          } else {
            lo[q] = _mm512_xor_si512(four(0), flip);
            hi[q] = _mm512_xor_si512(four(16), flip);
          }
        }
        const RowScales sc = gather_scales<F>(blk, offs);
        if constexpr (NX >= 2) {
          // Several activation rows: transpose the codes once per block so that dword
          // lane r of t[k] holds row r's elements 4k..4k+3 (t[4 + k]: 16 + 4k..), then
          // each row's block sum is 8 vpdpbusd against broadcast dwords of its
          // activation — no per-row transpose on the shuffle port. The same exact
          // integers, so the same bits.
          __m512i t[8];
          auto transpose4 = [](const __m512i* v, __m512i* out) {
            const __m512i u0 = _mm512_unpacklo_epi32(v[0], v[1]);
            const __m512i u1 = _mm512_unpackhi_epi32(v[0], v[1]);
            const __m512i u2 = _mm512_unpacklo_epi32(v[2], v[3]);
            const __m512i u3 = _mm512_unpackhi_epi32(v[2], v[3]);
            out[0] = _mm512_unpacklo_epi64(u0, u2);
            out[1] = _mm512_unpackhi_epi64(u0, u2);
            out[2] = _mm512_unpacklo_epi64(u1, u3);
            out[3] = _mm512_unpackhi_epi64(u1, u3);
          };
          transpose4(lo, t);
          transpose4(hi, t + 4);
          for (int j = 0; j < NX; ++j) {
            const XB& xj = xb[static_cast<size_t>(j)][b];
            // broadcast straight from memory (a load-port uop, not a shuffle)
            auto xd = [&](int k) { return _mm512_broadcastd_epi32(_mm_loadu_si32(xj.qs + 4 * k)); };
            __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), t[0], xd(0));
            __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), t[4], xd(4));
            for (int k = 1; k < 4; ++k) {
              i0 = _mm512_dpbusd_epi32(i0, t[k], xd(k));
              i1 = _mm512_dpbusd_epi32(i1, t[4 + k], xd(4 + k));
            }
            __m512i isum = _mm512_add_epi32(i0, i1);
            const XBlockSum& xv = xs[static_cast<size_t>(j)][static_cast<size_t>(b - s0)];
            if constexpr (F::kGemvOffset != 0)
              isum = _mm512_add_epi32(isum, _mm512_set1_epi32(xv.corr));
            acc[j] = F::step(acc[j], isum, sc.d, sc.m, xv.d, xv.s);
          }
          continue;
        }
        for (int j = 0; j < NX; ++j) {
          const XB& xj = xb[static_cast<size_t>(j)][b];
          const __m512i xlo = _mm512_broadcast_i32x4(load128(xj.qs));
          const __m512i xhi = _mm512_broadcast_i32x4(load128(xj.qs + 16));
          // s[q]: 128-bit lane L holds row 4L + q's four partial sums
          __m512i s[4];
          for (int q = 0; q < 4; ++q) {
            s[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[q], xlo),
                                       hi[q], xhi);
          }
          // 4×4 transpose-add within each 128-bit lane: lane 4L + q = Σ of s[q]'s group L
          const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]),
                                               _mm512_unpackhi_epi32(s[0], s[1]));
          const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]),
                                               _mm512_unpackhi_epi32(s[2], s[3]));
          __m512i isum =
              _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
          const XBlockSum& xv = xs[static_cast<size_t>(j)][static_cast<size_t>(b - s0)];
          if constexpr (F::kGemvOffset != 0)
            isum = _mm512_add_epi32(isum, _mm512_set1_epi32(xv.corr));
          acc[j] = F::step(acc[j], isum, sc.d, sc.m, xv.d, xv.s);
        }
      }
      for (int j = 0; j < NX; ++j) {
        _mm512_mask_storeu_ps(a.y + j * a.y_stride + r0, row_mask(nr), acc[j]);
      }
    }
  }
}

// Up to kMaxGemvRows activation rows in one pass over the weights.
template <class F>
void gemv_rows(const GemmArgs& a) {
  switch (a.n_x) {
    case 1:
      return gemv<F, 1>(a);
    case 2:
      return gemv<F, 2>(a);
    case 3:
      return gemv<F, 3>(a);
    case 4:
      return gemv<F, 4>(a);
    case 5:
      return gemv<F, 5>(a);
    case 6:
      return gemv<F, 6>(a);
    case 7:
      return gemv<F, 7>(a);
    default:
      return gemv<F, 8>(a);
  }
}

// ---- GEMM ----

struct WGroupBlock {  // 16 rows × one block, re-laid for vpdpbusd
  __m512i q[8];       // lane r: row r's codes 4j..4j+3 (signed)
  __m512i start;      // −128 · Σ code of row r
  __m512 d, m;        // row r's scale (and min)
};
struct XBlockU {
  uint8_t q[32];  // x + 128
  float d, s;
};

template <class F>
void prep_weights(const GemmArgs& a, int64_t n_groups, int64_t nb, WGroupBlock* out) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  alignas(64) std::array<int8_t, kG * kQK> t{};  // [row][element] signed codes
  const __m512i lane_rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(kQK)));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    const int64_t r0 = gi * kG;
    const __m512i offs = group_offsets(r0, a.n_w, a.w_stride);
    alignas(64) std::array<int32_t, kG> ov;
    _mm512_store_si512(ov.data(), offs);
    const uint8_t* g = w + r0 * static_cast<int64_t>(a.w_stride);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = g + b * kBlockBytes<F>;
      for (int64_t l = 0; l < kG; ++l) {
        F::decode(*reinterpret_cast<const typename F::WB*>(blk + ov[static_cast<size_t>(l)]),
                  t.data() + l * kQK);
      }
      WGroupBlock& o = out[gi * nb + b];
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        o.q[j] = _mm512_i32gather_epi32(lane_rows, t.data() + 4 * j, 1);
        sum = _mm512_dpbusd_epi32(sum, ones, o.q[j]);
      }
      o.start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
      const RowScales sc = gather_scales<F>(blk, offs);
      o.d = sc.d;
      o.m = sc.m;
    }
  }
}

// NG groups (16 rows each) × NX activation rows over every block.
template <class F, int NG, int NX>
void gemm_tile(int64_t nb, const WGroupBlock* wp, const XBlockU* xp, float* y, int64_t ys,
               int64_t n_rows_left) {
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
        std::memcpy(&v, xp[j * nb + b].q + 4 * k, 4);
        const __m512i xv = _mm512_set1_epi32(v);
        for (int gi = 0; gi < NG; ++gi) isum[gi][j] = _mm512_dpbusd_epi32(isum[gi][j], xv, wq[gi]);
      }
    }
    for (int gi = 0; gi < NG; ++gi) {
      const WGroupBlock& wb = wp[gi * nb + b];
      for (int j = 0; j < NX; ++j) {
        const XBlockU& xb = xp[j * nb + b];
        acc[gi][j] = F::step(acc[gi][j], isum[gi][j], wb.d, wb.m, xb.d, xb.s);
      }
    }
  }
  for (int gi = 0; gi < NG; ++gi) {
    const int64_t nr = std::min(kG, n_rows_left - gi * kG);
    for (int j = 0; j < NX; ++j) {
      _mm512_mask_storeu_ps(y + j * ys + gi * kG, row_mask(nr), acc[gi][j]);
    }
  }
}

using GemmTileFn = void (*)(int64_t, const WGroupBlock*, const XBlockU*, float*, int64_t, int64_t);
constexpr int kMaxNG = 2;
constexpr int kMaxNX = 4;
template <class F>
constexpr std::array<std::array<GemmTileFn, kMaxNX>, kMaxNG> kTiles = {{
    {&gemm_tile<F, 1, 1>, &gemm_tile<F, 1, 2>, &gemm_tile<F, 1, 3>, &gemm_tile<F, 1, 4>},
    {&gemm_tile<F, 2, 1>, &gemm_tile<F, 2, 2>, &gemm_tile<F, 2, 3>, &gemm_tile<F, 2, 4>},
}};

template <class F>
void gemm_batch(const GemmArgs& a) {
  using XB = typename F::XB;
  const int64_t nb = a.k / kQK;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  gemm_groups<WGroupBlock, XBlockU, kMaxNX, kMaxNG>(
      a, nb, [&](int64_t n_groups, WGroupBlock* out) { prep_weights<F>(a, n_groups, nb, out); },
      [&](const uint8_t* xrow, XBlockU* out) {
        const auto* row = reinterpret_cast<const XB*>(xrow);
        for (int64_t b = 0; b < nb; ++b) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), _mm256_xor_si256(q, flip));
          out[b].d = h2f(row[b].d);
          out[b].s = x_sum_scale(row[b]);
        }
      },
      [&](int64_t nx, int64_t ng, const WGroupBlock* wg, const XBlockU* xt, int64_t j0,
          int64_t g0) {
        kTiles<F>[static_cast<size_t>(ng - 1)][static_cast<size_t>(nx - 1)](
            nb, wg, xt, a.y + j0 * a.y_stride + g0 * kG, a.y_stride, a.n_w - g0 * kG);
      });
}

template <class F>
void gemm(const GemmArgs& a) {
  if (a.n_x <= kMaxGemvRows) {
    gemv_rows<F>(a);
  } else {
    gemm_batch<F>(a);
  }
}

template <class F>
float vec_dot(int64_t n, const void* w, const void* x) {
  float y = 0.0f;
  gemv<F, 1>(GemmArgs{.k = n,
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

}  // namespace

IsaDot avx512_rows_q4_0_repack_dot() {
  return {vec_dot<Q4_0RepackRows>, gemm<Q4_0RepackRows>, kMaxGemvRows};
}

IsaDot avx512_rows_dot(DType t) {
  switch (t) {
    case DType::kQ4_0:
      return {vec_dot<Q4_0Rows>, gemm<Q4_0Rows>, kMaxGemvRows};
    case DType::kQ4_1:
      return {vec_dot<Q4_1Rows>, gemm<Q4_1Rows>, kMaxGemvRows};
    case DType::kQ5_0:
      return {vec_dot<Q5_0Rows>, gemm<Q5_0Rows>, kMaxGemvRows};
    case DType::kQ5_1:
      return {vec_dot<Q5_1Rows>, gemm<Q5_1Rows>, kMaxGemvRows};
    case DType::kQ8_0:
      return {vec_dot<Q8_0Rows>, gemm<Q8_0Rows>, kMaxGemvRows};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
