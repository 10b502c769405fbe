// Stage 12 (kernels): the fast Walsh-Hadamard transform (hadamard.h) and the
// Op::kHadamard node: rows of blocks split across threads, never one block.
// Written by hand: the butterfly order is what makes the bits llama.cpp's; a library
// FFT/FWHT with another pass order or normalisation point would round differently.
#include "backend/cpu/hadamard.h"

#include <cmath>

#include "backend/cpu/ops.h"

namespace minfer::backend::cpu {

void hadamard_block(int64_t n, const float* x, float* y) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * scale;
  for (int64_t len = 1; len < n; len <<= 1) {
    for (int64_t i = 0; i < n; i += 2 * len) {
      float* a = y + i;
      float* b = y + i + len;
      for (int64_t j = 0; j < len; ++j) {
        const float u = a[j];
        const float v = b[j];
        a[j] = u + v;
        b[j] = u - v;
      }
    }
  }
}

Status op_hadamard(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const int64_t len = n.params.n_rot;
  const float* x = c.data.as<const float>(n.src[0]);
  float* y = c.data.as<float>(id);
  const int64_t blocks = n.shape.n_elements() / len;
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t r = lo; r < hi; ++r) hadamard_block(len, x + r * len, y + r * len);
  };
  parallel_range(c.pool, blocks, std::max<int64_t>(1, 8192 / len), body);
  return Ok{};
}

}  // namespace minfer::backend::cpu
