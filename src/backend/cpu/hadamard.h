// Stage 12 (kernels): the Walsh-Hadamard rotation of llama.cpp's quantized KV cache
// (graph Op::kHadamard). llama.cpp multiplies Q, K, V and the attention output, block by
// block, by the orthonormal Sylvester-Hadamard matrix H_n (H_1 = 1, H_2n = [[H, H],
// [H, −H]] / √2 overall); its CPU backend never reads that matrix but runs a fast
// transform (ggml_compute_forward_fwht): each element scaled by 1/sqrtf(n) first, then
// log2(n) in-place butterfly passes of span 1, 2, 4, … n/2, each pair (u, v) becoming
// (u + v, u − v). Every result element is one fixed tree of roundings, so a SIMD
// twin (ggml's fused u + v·(−1) is exactly u − v) is bitwise the scalar loop.
#pragma once

#include <cstdint>

namespace minfer::backend::cpu {

// y[0..n) = H_n · x[0..n) in ggml's order; n a power of two ≥ 2; y may alias x.
void hadamard_block(int64_t n, const float* x, float* y);

}  // namespace minfer::backend::cpu
