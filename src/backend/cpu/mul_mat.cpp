// Stage 12 (kernels): mul_mat — weights read in place in their GGUF type, activations
// converted per row to the weight type's vec_dot_type (ggml-cpu's scheme), one dot
// product per output element.
// Invariant (ARCHITECTURE §2.8): y[n, m] = vec_dot(w row n, xq row m) for every (n, m),
// whether M is 1 (decode GEMV) or many (prefill GEMM); threads split weight rows and
// activation rows, never a dot product, so results are bitwise independent of the
// thread count and of the batch.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "backend/cpu/ops.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

// Weight rows per tile: a tile's rows stay in cache while every activation row passes.
constexpr int64_t kTileRows = 16;
// ... and for a batch of at least kBatchRows activation rows.
constexpr int64_t kTileRowsBatch = 64;
constexpr int64_t kBatchRows = 6;
// A float-weight (F32/F16/BF16) GEMM call packs its weight rows once (and, but where the
// AVX2 tiles read f16 / bf16 ones in place, every activation row once per call), and the activation
// rows of a long batch come from L3: so each thread takes as few calls as keep its packed f32
// weight panel within half the L2 that cpuid reports (glibc's sysconf reads it; 1 MiB where it says
// nothing). On a 512 KiB L2 (AMD Zen 3, one core, F16 GEMM of 512 activation rows) 1 MiB panels ran
// at 64 GFLOP/s on 4,864-wide rows and 72 on 896-wide ones, 256 KiB panels at 76 and 84.
int64_t float_panel_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? std::clamp<int64_t>(l2 / 2, 64 << 10, 4 << 20) : int64_t{1} << 20;
  }();
  return bytes;
}
// The fewest weight rows a float GEMM call takes (its packing of activation rows is then
// shared by at least these).
constexpr int64_t kFloatCallRowsMin = 16;
// Decode: prefetch the weights this many tiles ahead of the one computing.
constexpr int64_t kPrefetchTiles = 1;  // 2 measured no better
// Activation rows quantized per chunk (each costs about a microsecond).
constexpr int64_t kQuantRowsPerChunk = 8;
// llama.cpp places the token embedding for get_rows, outside its repack buffer, also when
// the output layer reuses it (tied).
constexpr std::string_view kTokenEmbd = "token_embd.weight";

}  // namespace

Status op_mul_mat(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const graph::Node& wn = c.graph.node(n.src[0]);
  const graph::Node& xn = c.graph.node(n.src[1]);
  const int64_t k_dim = wn.shape.ne[0];
  const int64_t n_out = wn.shape.ne[1];
  const int64_t m_rows = xn.shape.n_rows();
  DotKernel dk = c.k.dot_kernel(wn.dtype);
  if (c.k.repack_dot_kernel != nullptr && llamacpp_repacks(wn.dtype, n_out) &&
      wn.name != kTokenEmbd) {
    // llama.cpp repacked this weight at load (its CPU_REPACK buffer): its repack order.
    const DotKernel r = c.k.repack_dot_kernel(wn.dtype);
    if (r.vec_dot != nullptr) dk = r;
  }
  if (dk.vec_dot == nullptr) {
    return make_error(
        fmt::format("mul_mat '{}': no kernel for weight type {}", n.name, dtype_name(wn.dtype)));
  }
  // Rows served by vec_dot_batch / from_f32_batch (all of a batch unless batch_group).
  const int64_t m_batch = dk.batch_group > 0 ? m_rows - m_rows % dk.batch_group : m_rows;
  const uint64_t w_row = graph::tensor_bytes(wn.dtype, graph::Shape{k_dim});
  auto xrb = quant::row_bytes(dk.vec_dot_type, static_cast<uint64_t>(k_dim));
  if (!xrb.ok()) return xrb.error().context(fmt::format("mul_mat '{}'", n.name));
  const uint64_t x_row = *xrb;
  const std::byte* w = c.data[n.src[0]];
  const float* x = c.data.as<const float>(n.src[1]);
  float* y = c.data.as<float>(id);
  const bool direct = dk.vec_dot_type == DType::kF32;
  const uint8_t* xq = direct ? reinterpret_cast<const uint8_t*>(x)
                             : c.scratch.get(static_cast<size_t>(x_row * m_rows));
  ThreadPool& pool = c.pool;

  if (!direct) {
    // F32 → vec_dot_type, one activation row at a time (a row's bytes never depend on
    // its batch); a decode row is quantized by the caller alone.
    uint8_t* dst = const_cast<uint8_t*>(xq);
    parallel_range(pool, m_rows, kQuantRowsPerChunk, [&](int64_t lo, int64_t hi, int32_t) {
      for (int64_t m = lo; m < hi; ++m) {
        const FromF32Fn q =
            dk.from_f32_batch != nullptr && m < m_batch ? dk.from_f32_batch : dk.from_f32;
        q(x + m * k_dim, dst + m * x_row, k_dim);
      }
    });
  }
  // Weight rows in tiles; a chunk owns whole output rows for every activation row.
  // A batch amortizes each activation row's preparation over more weight rows.
  int64_t tile_rows = m_rows >= kBatchRows ? kTileRowsBatch : kTileRows;
  const bool float_w =
      wn.dtype == DType::kF32 || wn.dtype == DType::kF16 || wn.dtype == DType::kBF16;
  if (float_w && m_rows >= kBatchRows && dk.gemm != nullptr && dk.vec_dot_batch == nullptr) {
    const int64_t per_thread = (n_out + pool.n_threads() - 1) / pool.n_threads();
    const int64_t fits = std::max(kFloatCallRowsMin, float_panel_bytes() / (k_dim * 4));
    const int64_t calls = (per_thread + fits - 1) / fits;
    tile_rows =
        std::max<int64_t>(kFloatCallRowsMin, ((per_thread + calls - 1) / calls + 15) / 16 * 16);
  }
  const int64_t n_tiles = (n_out + tile_rows - 1) / tile_rows;
  parallel_range(pool, n_tiles, 1, [&](int64_t t_lo, int64_t t_hi, int32_t) {
    if (dk.gemm != nullptr && m_rows <= dk.gemv_rows_max &&
        (m_rows == 1 || dk.vec_dot_batch == nullptr)) {
      // Decode (one row, or a small batch the kernel takes in one pass over the
      // weights): the register-blocked GEMV walks the chunk's rows itself (and
      // prefetches them), its activation preparation done once per chunk.
      const int64_t r0 = t_lo * tile_rows;
      dk.gemm(GemmArgs{.k = k_dim,
                       .w = w + r0 * w_row,
                       .w_stride = w_row,
                       .n_w = std::min(n_out, t_hi * tile_rows) - r0,
                       .x = xq,
                       .x_stride = x_row,
                       .n_x = m_rows,
                       .y = y + r0,
                       .y_stride = n_out});
      return;
    }
    for (int64_t tile = t_lo; tile < t_hi; ++tile) {
      const int64_t r0 = tile * tile_rows;
      const int64_t r1 = std::min(n_out, r0 + tile_rows);
      if (m_rows == 1 && tile + kPrefetchTiles < t_hi) {
        // Decode streams every weight once: ask for a later tile of the chunk while this one
        // computes (short rows interleaved in a tile defeat the hardware prefetcher).
        const int64_t p0 = r0 + kPrefetchTiles * kTileRows;
        const std::byte* next = w + p0 * w_row;
        const uint64_t bytes = static_cast<uint64_t>(std::min(n_out, p0 + kTileRows) - p0) * w_row;
        for (uint64_t off = 0; off < bytes; off += 64) __builtin_prefetch(next + off, 0, 3);
      }
      if (dk.vec_dot_batch != nullptr && m_rows >= std::max<int64_t>(2, dk.batch_min_rows) &&
          n_out % dk.batch_w_rows_multiple == 0) {
        for (int64_t m = 0; m < m_rows; ++m) {
          const uint8_t* xr = xq + m * x_row;
          float* yr = y + m * n_out;
          const VecDotFn dot = m < m_batch ? dk.vec_dot_batch : dk.vec_dot;
          for (int64_t r = r0; r < r1; ++r) yr[r] = dot(k_dim, w + r * w_row, xr);
        }
        continue;
      }
      if (dk.gemm != nullptr && m_rows > 1) {
        dk.gemm(GemmArgs{.k = k_dim,
                         .w = w + r0 * w_row,
                         .w_stride = w_row,
                         .n_w = r1 - r0,
                         .x = xq,
                         .x_stride = x_row,
                         .n_x = m_rows,
                         .y = y + r0,
                         .y_stride = n_out});
        continue;
      }
      for (int64_t m = 0; m < m_rows; ++m) {
        const uint8_t* xr = xq + m * x_row;
        float* yr = y + m * n_out;
        for (int64_t r = r0; r < r1; ++r) yr[r] = dk.vec_dot(k_dim, w + r * w_row, xr);
      }
    }
  });
  return Ok{};
}

}  // namespace minfer::backend::cpu
