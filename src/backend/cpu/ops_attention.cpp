// Stage 12 (kernels): attention over the cells of the kv_window input, GQA, with an
// online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
// softmax"; the flash-attention recurrence).
// Invariant (ARCHITECTURE §2.8): a (token, head) result depends only on its query row,
// its window row and the KV contents. Cells are walked in window order (ascending
// position) and cut into chunks every kChunk cells counted from the first cell the
// query sees — i.e. at fixed positions, not at cell indices — so the max-rescaling
// points are the same for a token decoded alone or prefilled in a batch, and for a
// sequence whatever cells of the shared store hold it (its own run from cell 0, a run
// elsewhere, or a shared prefix run plus its own). One thread owns one (token, head):
// threads never split its reduction. A query whose window is empty is a padding row
// of a bucketed batch (src/kv never produces an empty window for a real row): its
// output is zero.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backend/cpu/attn_ggml_f16.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/vec_dot.h"
#include "core/fp16.h"

namespace minfer::backend::cpu {
namespace {

// Scores per chunk; fixed (part of the numerics), not a tuning knob of the batch.
constexpr int32_t kChunk = 64;

// AttnNumerics::kGgmlF16: llama.cpp's CPU flash-attention vector path, element for
// element (ggml-cpu ops.cpp, flash_attn_ext_f16_one_chunk), as its default native build
// runs it on an x86 CPU with AVX512-FP16; its f16 helpers: attn_ggml_f16.h.
}  // namespace

Status op_attention(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const graph::Node& qn = c.graph.node(n.src[0]);
  const graph::Node& kn = c.graph.node(n.src[1]);
  const graph::Node& vn = c.graph.node(n.src[2]);
  const graph::Node& wn = c.graph.node(n.src[3]);
  const int64_t hd = qn.shape.ne[0];
  const int64_t n_head = n.params.n_head;
  const int64_t n_head_kv = n.params.n_head_kv;
  const int64_t n_tok = qn.shape.ne[2];
  const int64_t hd_v = vn.shape.ne[0] / n_head_kv;
  const int64_t row_k = kn.shape.ne[0];
  const int64_t row_v = vn.shape.ne[0];
  const int64_t n_cells = kn.shape.ne[1];
  const int64_t n_runs = wn.shape.ne[0] / 2;
  const int32_t* win = c.data.as<const int32_t>(n.src[3]);
  int64_t n_real = 0;  // query rows that see cells (the others are bucket padding)
  for (int64_t t = 0; t < n_tok; ++t) {
    int64_t total = 0;
    for (int64_t r = 0; r < n_runs; ++r) {
      const int32_t first = win[t * 2 * n_runs + 2 * r];
      const int32_t cnt = win[t * 2 * n_runs + 2 * r + 1];
      if (first < 0 || cnt < 0 || int64_t{first} + cnt > n_cells) {
        return make_error(
            fmt::format("attention '{}' (layer {}): window run {} of query {} = "
                        "(first {}, n {}) is outside [0, {})",
                        n.name, n.params.layer, r, t, first, cnt, n_cells));
      }
      total += cnt;
    }
    n_real += total > 0 ? 1 : 0;
  }
  const float* q = c.data.as<const float>(n.src[0]);
  float* out = c.data.as<float>(id);
  const float scale = n.params.scale;
  const int64_t group = n_head / n_head_kv;
  const IsaKernels& k = c.k;
  const bool f16_kv = kn.dtype == DType::kF16;
  // Per thread: acc [hd_v] + K row [hd] + V row [hd_v] floats, then f16 Q [hd] and f16
  // accumulator [hd_v]; reserved before the threads start.
  // The tiled path: acc [hd_v] and the visible cells (int32) after it.
  const int64_t stride =
      std::max(2 * hd_v + hd + (hd + hd_v + 1) / 2 + 16, hd_v + n_cells * n_runs + 16);
  float* scratch_all = reinterpret_cast<float*>(
      c.scratch.get(static_cast<size_t>(c.pool.n_threads() * stride) * sizeof(float)));

  if (n.params.ggml_f16 != 0) {
    const auto* kc = c.data.as<const uint16_t>(n.src[1]);
    const auto* vc = c.data.as<const uint16_t>(n.src[2]);
    const auto dot16 = k.ggml_fa_dot_f16 != nullptr ? k.ggml_fa_dot_f16 : ggml_dot_f16_vec_scalar;
    const auto mad16 = k.ggml_fa_mad_f16 != nullptr ? k.ggml_fa_mad_f16 : ggml_mad_f16_scalar;
    const auto scale16 =
        k.ggml_fa_scale_f16 != nullptr ? k.ggml_fa_scale_f16 : ggml_scale_f16_scalar;
    // llama.cpp's tiled kernel for a ubatch this tall, as its default build runs it: so
    // under --numerics llamacpp (only there) a row's bits depend on how many rows share
    // its batch, as in llama.cpp — the one place that mode gives up invariant 8, on
    // purpose and documented (docs/ARCHITECTURE.md). MINFER_LLAMACPP_TILED_ATTN=0 keeps
    // the per-row kernel for every batch (batch-invariant, llama.cpp's bits for < 64 rows).
    static const bool tiled_on = [] {
      const char* e = std::getenv("MINFER_LLAMACPP_TILED_ATTN");
      return e == nullptr || std::string_view(e) != "0";
    }();
    if (tiled_on && n_real >= kGgmlFaTileRows) {
      auto tiled = [&](int64_t lo, int64_t hi, int32_t thread) {
        float* acc = scratch_all + thread * stride;
        auto* cells = reinterpret_cast<int32_t*>(acc + hd_v);
        for (int64_t item = lo; item < hi; ++item) {
          const int64_t t = item / n_head;
          const int64_t h = item % n_head;
          const int64_t kvh = h / group;
          int64_t nc = 0;
          for (int64_t r = 0; r < n_runs; ++r) {
            const int32_t first = win[t * 2 * n_runs + 2 * r];
            const int32_t cnt = win[t * 2 * n_runs + 2 * r + 1];
            for (int32_t cell = first; cell < first + cnt; ++cell) cells[nc++] = cell;
          }
          std::sort(cells, cells + nc);  // llama.cpp walks the cache in cell order
          ggml_fa_tiled_row(hd, hd_v, q + (t * n_head + h) * hd, kc + kvh * hd, row_k,
                            vc + kvh * hd_v, row_v, cells, nc, scale, acc,
                            out + t * (n_head * hd_v) + h * hd_v);
        }
      };
      parallel_range(c.pool, n_tok * n_head, 1, tiled);
      return Ok{};
    }
    auto body = [&](int64_t lo, int64_t hi, int32_t thread) {
      float* base = scratch_all + thread * stride;
      auto* q16 = reinterpret_cast<uint16_t*>(base + 2 * hd_v + hd);
      uint16_t* acc16 = q16 + hd;
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t t = item / n_head;
        const int64_t h = item % n_head;
        const int64_t kvh = h / group;
        from_f32_f16(q + (t * n_head + h) * hd, q16, hd);
        std::fill(acc16, acc16 + hd_v, uint16_t{0});
        float m = -INFINITY;
        float l = 0.0f;
        for (int64_t r = 0; r < n_runs; ++r) {
          const int64_t first = win[t * 2 * n_runs + 2 * r];
          const int64_t end = first + win[t * 2 * n_runs + 2 * r + 1];
          for (int64_t cell = first; cell < end; ++cell) {
            const float sc = dot16(hd, kc + cell * row_k + kvh * hd, q16) * scale;
            float ms = 1.0f;
            float vs = 1.0f;
            if (sc > m) {
              ms = std::exp(m - sc);  // m = −inf on the first cell: ms = 0
              m = sc;
              scale16(hd_v, acc16, ms);
            } else {
              vs = std::exp(sc - m);
            }
            mad16(hd_v, acc16, vc + cell * row_v + kvh * hd_v, vs);
            l = std::fma(l, ms, vs);
          }
        }
        float* o = out + t * (n_head * hd_v) + h * hd_v;
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        for (int64_t i = 0; i < hd_v; ++i) o[i] = fp16_to_fp32(acc16[i]) * inv;
      }
    };
    parallel_range(c.pool, n_tok * n_head, 1, body);
    return Ok{};
  }

  // f32 numerics over f32 or f16 cells (f16 rows are widened exactly, so an f16 cache
  // gives the f32 result on the rounded values).
  auto run = [&](auto* kc, auto* vc) {
    auto body = [&](int64_t lo, int64_t hi, int32_t thread) {
      float* acc = scratch_all + thread * stride;
      float* kbuf = acc + hd_v;
      float* vbuf = kbuf + hd;
      auto row = [&](auto* base, int64_t off, int64_t len, float* buf) -> const float* {
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(base)>>,
                                     float>) {
          return base + off;
        } else {
          k.f16_to_f32(len, base + off, buf);
          return buf;
        }
      };
      constexpr bool kF32Cells =
          std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(kc)>>, float>;
      float s[kChunk];
      struct Piece {
        int64_t cell;  // first cell of this piece of a run
        int64_t n;     // cells
        int64_t off;   // offset in the chunk's scores
      };
      Piece piece[kChunk];
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t t = item / n_head;
        const int64_t h = item % n_head;
        const int64_t kvh = h / group;
        const float* qr = q + (t * n_head + h) * hd;
        std::fill(acc, acc + hd_v, 0.0f);
        float m = -INFINITY;
        float l = 0.0f;
        const int32_t* wrow = win + t * 2 * n_runs;
        int64_t r = 0;
        int64_t cur = n_runs > 0 ? wrow[0] : 0;
        int64_t run_end = n_runs > 0 ? cur + wrow[1] : 0;
        for (;;) {
          // The next chunk: up to kChunk cells in window order, possibly spanning runs.
          int64_t n_pieces = 0;
          int64_t filled = 0;
          while (filled < kChunk && r < n_runs) {
            if (cur == run_end) {
              if (++r < n_runs) {
                cur = wrow[2 * r];
                run_end = cur + wrow[2 * r + 1];
              }
              continue;
            }
            const int64_t take = std::min(kChunk - filled, run_end - cur);
            piece[n_pieces++] = {.cell = cur, .n = take, .off = filled};
            filled += take;
            cur += take;
          }
          if (filled == 0) break;
          float mc = -INFINITY;
          for (int64_t pi = 0; pi < n_pieces; ++pi) {
            const Piece& pc = piece[pi];
            float* sp = s + pc.off;
            if constexpr (kF32Cells) {  // a run's cells in one call: bitwise the per-cell loop
              k.attn_scores_f32(pc.n, hd, qr, kc + pc.cell * row_k + kvh * hd, row_k, scale, sp);
              // fmax, inlined: NaN never wins, and the sign of a zero maximum cannot
              // change exp(s − m)
              for (int64_t i = 0; i < pc.n; ++i) mc = sp[i] > mc ? sp[i] : mc;
            } else {
              for (int64_t i = 0; i < pc.n; ++i) {
                const int64_t cell = pc.cell + i;
                const float v =
                    k.dot_f32(hd, qr, row(kc, cell * row_k + kvh * hd, hd, kbuf)) * scale;
                sp[i] = v;
                mc = std::fmax(mc, v);
              }
            }
          }
          if (mc > m) {
            const float f = std::exp(m - mc);  // m = −inf on the first chunk: f = 0
            for (int64_t i = 0; i < hd_v; ++i) acc[i] *= f;
            l *= f;
            m = mc;
          }
          for (int64_t pi = 0; pi < n_pieces; ++pi) {
            const Piece& pc = piece[pi];
            float* sp = s + pc.off;
            if constexpr (kF32Cells) {  // weights first, then the rows in cell order
              for (int64_t i = 0; i < pc.n; ++i) {
                sp[i] = std::exp(sp[i] - m);
                l += sp[i];
              }
              // y = y + p·v per element in cell order: one call per run piece is
              // bitwise one call over the chunk
              k.attn_axpy_rows_f32(pc.n, hd_v, sp, vc + pc.cell * row_v + kvh * hd_v, row_v, acc);
            } else {
              for (int64_t i = 0; i < pc.n; ++i) {
                const int64_t cell = pc.cell + i;
                const float p = std::exp(sp[i] - m);
                l += p;
                k.axpy_f32(hd_v, p, row(vc, cell * row_v + kvh * hd_v, hd_v, vbuf), acc);
              }
            }
          }
        }
        float* o = out + t * (n_head * hd_v) + h * hd_v;
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;  // l == 0: a padding row
        for (int64_t i = 0; i < hd_v; ++i) o[i] = acc[i] * inv;
      }
    };
    parallel_range(c.pool, n_tok * n_head, 1, body);
  };
  if (f16_kv) {
    run(c.data.as<const uint16_t>(n.src[1]), c.data.as<const uint16_t>(n.src[2]));
  } else {
    run(c.data.as<const float>(n.src[1]), c.data.as<const float>(n.src[2]));
  }
  return Ok{};
}

}  // namespace minfer::backend::cpu
