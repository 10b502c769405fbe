// Stage 3 (quant): the byte layout of every block type we compute with, so kernels
// (scalar now, SIMD later) read the bytes of a GGUF tensor in place.
// Invariant: each struct is exactly ggml's block (ggml/src/ggml-common.h): same field
// order, same size (static_asserts below against core/dtype.cpp), no padding.
#pragma once

#include <cstdint>

namespace minfer::quant {

// Elements per block of the legacy formats (ggml QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0).
inline constexpr int kQK = 32;
// Elements per super-block of the k-quants (ggml QK_K).
inline constexpr int kQKK = 256;
// Bytes of the packed 6-bit scales/mins of Q4_K and Q5_K (ggml K_SCALE_SIZE).
inline constexpr int kKScaleSize = 12;

// IEEE binary16 bits; all scales in blocks are stored as fp16 (except Q8_K's float).
using Half = uint16_t;

// x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble) and j + 16 (high).
struct BlockQ4_0 {
  Half d;
  uint8_t qs[kQK / 2];
};

// x = d * q + m, q in [0, 15]; nibble layout as Q4_0.
struct BlockQ4_1 {
  Half d;
  Half m;
  uint8_t qs[kQK / 2];
};

// x = d * (q - 16), q in [0, 31]; low nibbles as Q4_0, bit 4 of element j in bit j of qh.
struct BlockQ5_0 {
  Half d;
  uint8_t qh[4];  // little-endian uint32, unaligned in the block
  uint8_t qs[kQK / 2];
};

// x = d * q + m, q in [0, 31]; layout as Q5_0.
struct BlockQ5_1 {
  Half d;
  Half m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  Half d;
  int8_t qs[kQK];
};

// 16 sub-blocks of 16: x = d * sc * q - dmin * m with q in [0, 3], sc/m 4-bit each
// (scales[j] = sc | m << 4). qs: per 128-element half, byte l holds elements
// l, l + 32, l + 64, l + 96 in its bit pairs 0-1, 2-3, 4-5, 6-7.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  Half d;
  Half dmin;
};

// 16 sub-blocks of 16: x = d * (sc - 32) * (q - 4), q in [0, 7], sc 6-bit.
// Low 2 bits of q as Q2_K's qs; bit 2 of element j in bit (j / 32) of hmask[j % 32].
// scales: the low nibbles of sc 0-7 in scales[0..7] low, of sc 8-15 in scales[0..7]
// high; the 2 high bits of sc j in scales[8 + j % 4] at bit 2 * (j / 4).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  Half d;
};

// 8 sub-blocks of 32: x = d * sc * q - dmin * m, q in [0, 15], sc/m 6-bit packed in
// `scales` (see get_scale_min in kquants.cpp). qs: per 64 elements, 32 bytes whose low
// nibbles are elements 0-31 and high nibbles elements 32-63.
struct BlockQ4_K {
  Half d;
  Half dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQKK / 2];
};

// As Q4_K with q in [0, 31]; bit 4 of the element at (64 * p + 32 * h + l) is bit
// (2 * p + h) of qh[l].
struct BlockQ5_K {
  Half d;
  Half dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// 16 sub-blocks of 16: x = d * sc * (q - 32), q in [0, 63], sc int8. Per 128-element
// half: ql[l] low nibble = element l, high = l + 64; ql[l + 32] low = l + 32, high =
// l + 96; qh[l] bit pairs 0-1, 2-3, 4-5, 6-7 are the high bits of l, l+32, l+64, l+96.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  Half d;
};

// Activation format for k-quant dot products: x = d * q, q in [-127, 127]; bsums are
// the sums of each 16 consecutive q.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace minfer::quant
