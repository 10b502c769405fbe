// Stage 12 (kernels): attention over the cells of the kv_window input, GQA, with an
// online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
// softmax"; the flash-attention recurrence).
// Invariant (ARCHITECTURE §2.8): a (token, head) result depends only on its query row,
// its window row and the KV contents. Cells are walked in window order (ascending
// position) and cut into chunks every kChunk cells counted from the first cell the
// query sees — i.e. at fixed positions, not at cell indices — so the max-rescaling
// points are the same for a token decoded alone or prefilled in a batch, and for a
// sequence whatever cells of the shared store hold it (its own run from cell 0, a run
// elsewhere, or a shared prefix run plus its own). One thread owns one (token, head) —
// or two heads of one KV head, each with its own arithmetic: threads never split a
// reduction (--numerics llamacpp's split-KV decode cuts a row's cells by llama.cpp's
// thread count, as llama.cpp does, but one thread still walks all the chunks). A query whose window
// is empty is a padding row of a bucketed batch (src/kv never produces an empty window for a real
// row): its output is zero.
#include <fmt/format.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "backend/cpu/attn_ggml_f16.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/vec_dot.h"
#include "core/config.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

// Scores per chunk; fixed (part of the numerics), not a tuning knob of the batch.
constexpr int32_t kChunk = 64;
// Query tokens per work item of the f32 path (a tuning knob: the arithmetic of a row does
// not depend on it).
constexpr int64_t kTokBlock = 8;
// Cells whose K and V rows (one KV head's slice) a work item keeps widened or decoded
// over f16 / quantized cells, direct-mapped by cell: the block's tokens walk the same
// chunks in turn, so a row is decoded once per item, not once per token (a tuning knob:
// decoding is exact, the bits do not depend on it).
constexpr int64_t kRowCache = 2 * kChunk;

// The largest of a chunk's n scores, −inf for none; as `m = s > m ? s : m` over the cells,
// 16 running maxima wide (SSE's maxps is that expression), the lanes then combined
// pairwise. A maximum is exact whatever the order: no lane is ever NaN (a NaN score
// never wins the comparison), and only the sign of a zero maximum can differ, which
// cannot change exp(s − m) or the rescale exp(m − m').
inline float chunk_max(const float* s, int64_t n) {
  constexpr int kLanes = 16;
  alignas(16) float lane[kLanes];
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 v[4];
  for (__m128& x : v) x = _mm_set1_ps(-INFINITY);
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < 4; ++j) v[j] = _mm_max_ps(_mm_loadu_ps(s + i + 4 * j), v[j]);
  }
  for (int j = 0; j < 4; ++j) _mm_store_ps(lane + 4 * j, v[j]);
#else
  std::fill(lane, lane + kLanes, -INFINITY);
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] = s[i + j] > lane[j] ? s[i + j] : lane[j];
  }
#endif
  for (; i < n; ++i) lane[0] = s[i] > lane[0] ? s[i] : lane[0];
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) lane[j] = lane[j + w] > lane[j] ? lane[j + w] : lane[j];
  }
  return lane[0];
}

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
  // Per thread: acc [kTokBlock][2][hd_v] + K row [hd] + V row [hd_v] floats (the f32
  // path), or acc [hd_v] + K row + V row, then f16 Q [hd] and f16 accumulator [hd_v] (the
  // ggml_f16 path); reserved before the threads start.
  // The tiled path: acc [hd_v] and the visible cells (int32) after it.
  // The f32 path over f16 / quantized cells adds its row cache: kRowCache K rows [hd],
  // V rows [hd_v] and their cells (int32).
  const int64_t stride =
      std::max({kTokBlock * 2 * hd_v + kRowCache * (hd + hd_v + 1) + 16,
                2 * hd_v + hd + (hd + hd_v + 1) / 2 + 16, hd_v + n_cells * n_runs + 16});
  float* scratch_all = reinterpret_cast<float*>(
      c.scratch.get(static_cast<size_t>(c.pool.n_threads() * stride) * sizeof(float)));

  if (n.params.ggml_f16 != 0 && (kn.dtype != DType::kF16 || vn.dtype != DType::kF16)) {
    // llama.cpp's flash attention over a quantized (or mixed) cache: never tiled, never
    // split-KV (both need K and V f16 or f32 alike), so every row takes its per-row
    // vector kernel (flash_attn_ext_f16_one_chunk): Q converted to K's activation format
    // (q8_0 for a q8_0 / q4_0 K, f16 for an f16 K) and scored with K's mul_mat dot in
    // ggml's x86 order; an f16 V accumulates as in the f16 path, a quantized V decodes
    // each row to f32 and accumulates in f32 (acc = fma(v, p, acc), ggml_vec_mad_f32's
    // vector body: head sizes that are multiples of its 64-float step).
    if (kn.dtype == DType::kF32 || vn.dtype == DType::kF32) {
      return make_error(fmt::format("attention '{}': ggml-f16 numerics over {} K / {} V cells",
                                    n.name, dtype_name(kn.dtype), dtype_name(vn.dtype)));
    }
    const bool k16 = kn.dtype == DType::kF16;
    const DotKernel kdot = k16 ? DotKernel{} : c.k.dot_kernel(kn.dtype);
    const quant::TypeTraits* kt = k16 ? nullptr : quant::traits(kn.dtype);
    const quant::TypeTraits* vt = vn.dtype == DType::kF16 ? nullptr : quant::traits(vn.dtype);
    if ((!k16 && (kdot.vec_dot == nullptr || kt == nullptr || hd % kt->block_size != 0)) ||
        (vt != nullptr && hd_v % vt->block_size != 0)) {
      return make_error(fmt::format("attention '{}': no {} K / {} V cells of head size {}", n.name,
                                    dtype_name(kn.dtype), dtype_name(vn.dtype), hd));
    }
    quant::DequantizeFn vdeq = vt != nullptr ? vt->dequantize : nullptr;
    if (vn.dtype == DType::kQ8_0 && k.q8_0_to_f32 != nullptr) vdeq = k.q8_0_to_f32;
    if (vn.dtype == DType::kQ4_0 && k.q4_0_to_f32 != nullptr) vdeq = k.q4_0_to_f32;
    const auto* kc = c.data.as<const uint8_t>(n.src[1]);
    const auto* vc = c.data.as<const uint8_t>(n.src[2]);
    // bytes of a cell's row and of one head's slice of it
    const int64_t k_row_bytes = k16 ? row_k * 2 : row_k / kt->block_size * kt->type_size;
    const int64_t k_head_bytes = k16 ? hd * 2 : hd / kt->block_size * kt->type_size;
    const int64_t v_row_bytes = vt == nullptr ? row_v * 2 : row_v / vt->block_size * vt->type_size;
    const int64_t v_head_bytes = vt == nullptr ? hd_v * 2 : hd_v / vt->block_size * vt->type_size;
    const auto dot16 = k.ggml_fa_dot_f16 != nullptr ? k.ggml_fa_dot_f16 : ggml_dot_f16_vec_scalar;
    const auto mad16 = k.ggml_fa_mad_f16 != nullptr ? k.ggml_fa_mad_f16 : ggml_mad_f16_scalar;
    const auto scale16 =
        k.ggml_fa_scale_f16 != nullptr ? k.ggml_fa_scale_f16 : ggml_scale_f16_scalar;
    auto body = [&](int64_t lo, int64_t hi, int32_t thread) {
      // acc32 [hd_v], V row [hd_v], then Q in K's format (at most hd f16 or q8_0 bytes)
      // and the f16 accumulator [hd_v]
      float* acc = scratch_all + thread * stride;
      float* vrow = acc + hd_v;
      auto* qq = reinterpret_cast<uint8_t*>(vrow + hd_v);
      auto* acc16 = reinterpret_cast<uint16_t*>(qq + hd * 2);
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t t = item / n_head;
        const int64_t h = item % n_head;
        const int64_t kvh = h / group;
        const float* qr = q + (t * n_head + h) * hd;
        if (k16) {
          from_f32_f16(qr, qq, hd);
        } else {
          kdot.from_f32(qr, qq, hd);
        }
        if (vt == nullptr) {
          std::fill(acc16, acc16 + hd_v, uint16_t{0});
        } else {
          std::fill(acc, acc + hd_v, 0.0f);
        }
        float m = -INFINITY;
        float l = 0.0f;
        for (int64_t r = 0; r < n_runs; ++r) {
          const int64_t first = win[t * 2 * n_runs + 2 * r];
          const int64_t end = first + win[t * 2 * n_runs + 2 * r + 1];
          for (int64_t cell = first; cell < end; ++cell) {
            const uint8_t* kr = kc + cell * k_row_bytes + kvh * k_head_bytes;
            const float sc = (k16 ? dot16(hd, reinterpret_cast<const uint16_t*>(kr),
                                          reinterpret_cast<const uint16_t*>(qq))
                                  : kdot.vec_dot(hd, kr, qq)) *
                             scale;
            float ms = 1.0f;
            float vs = 1.0f;
            const uint8_t* vr = vc + cell * v_row_bytes + kvh * v_head_bytes;
            if (sc > m) {
              ms = std::exp(m - sc);  // m = −inf on the first cell: ms = 0
              m = sc;
              if (vt == nullptr) {
                scale16(hd_v, acc16, ms);
              } else {
                for (int64_t i = 0; i < hd_v; ++i) acc[i] *= ms;
              }
            } else {
              vs = std::exp(sc - m);
            }
            if (vt == nullptr) {
              mad16(hd_v, acc16, reinterpret_cast<const uint16_t*>(vr), vs);
            } else {
              vdeq(vr, vrow, hd_v);
              for (int64_t i = 0; i < hd_v; ++i) acc[i] = std::fma(vrow[i], vs, acc[i]);
            }
            l = std::fma(l, ms, vs);
          }
        }
        float* o = out + t * (n_head * hd_v) + h * hd_v;
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        for (int64_t i = 0; i < hd_v; ++i) {
          o[i] = (vt == nullptr ? fp16_to_fp32(acc16[i]) : acc[i]) * inv;
        }
      }
    };
    parallel_range(c.pool, n_tok * n_head, 1, body);
    return Ok{};
  }
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
    const bool tiled_on = Config::get().llamacpp_tiled_attn;
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
                            out + t * (n_head * hd_v) + h * hd_v, k.ggml_fa_tiled_lanes8);
        }
      };
      parallel_range(c.pool, n_tok * n_head, 1, tiled);
      return Ok{};
    }
    // llama.cpp's split-KV decode (ops.cpp flash_attn_ext_f16, use_split_kv_path): a
    // one-token ubatch whose KV view holds >= kGgmlFaSplitKvMin cells is cut into one
    // chunk per thread of its pool — the view being the used cells padded to
    // kGgmlKvPad, at least kGgmlKvPad — each chunk walked from scratch (its own max, sum
    // and f16 accumulator, widened at the end), and the chunks combined in order in f32
    // as its compiled reduction does: acc = fma(acc, e^(M - M'), chunk · e^(m - M')),
    // S likewise (ggml_flash_attn_ext_reduce_partials; chunks without a visible cell
    // skipped). So under --numerics llamacpp a decoded row that sees a cell at or past
    // 256 depends on the thread count, as in llama.cpp run with the same -t.
    const int64_t n_split = c.pool.n_threads();
    auto body = [&](int64_t lo, int64_t hi, int32_t thread) {
      float* base = scratch_all + thread * stride;
      float* fin = base;  // split-KV decode: the combined f32 accumulator [hd_v]
      auto* q16 = reinterpret_cast<uint16_t*>(base + 2 * hd_v + hd);
      uint16_t* acc16 = q16 + hd;
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t t = item / n_head;
        const int64_t h = item % n_head;
        const int64_t kvh = h / group;
        from_f32_f16(q + (t * n_head + h) * hd, q16, hd);
        // The online softmax over the window's cells in [c_lo, c_hi): acc16, m, l.
        auto walk = [&](int64_t c_lo, int64_t c_hi, float& m, float& l) {
          std::fill(acc16, acc16 + hd_v, uint16_t{0});
          m = -INFINITY;
          l = 0.0f;
          for (int64_t r = 0; r < n_runs; ++r) {
            const int64_t first = win[t * 2 * n_runs + 2 * r];
            const int64_t end = first + win[t * 2 * n_runs + 2 * r + 1];
            for (int64_t cell = std::max(first, c_lo); cell < std::min(end, c_hi); ++cell) {
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
        };
        int64_t used = 0;  // llama.cpp's used_max_p1 for a lone sequence: its last cell + 1
        for (int64_t r = 0; r < n_runs; ++r) {
          const int64_t cnt = win[t * 2 * n_runs + 2 * r + 1];
          if (cnt > 0) used = std::max(used, int64_t{win[t * 2 * n_runs + 2 * r]} + cnt);
        }
        const int64_t n_kv =
            std::max(kGgmlKvPad, (used + kGgmlKvPad - 1) / kGgmlKvPad * kGgmlKvPad);
        float* o = out + t * (n_head * hd_v) + h * hd_v;
        if (n_tok == 1 && n_kv >= kGgmlFaSplitKvMin) {
          const int64_t chunk = (n_kv + n_split - 1) / n_split;
          std::fill(fin, fin + hd_v, 0.0f);
          float big_m = -INFINITY;
          float big_s = 0.0f;
          for (int64_t ch = 0; ch < n_split && ch * chunk < n_kv; ++ch) {
            float m = 0.0f;
            float l = 0.0f;
            walk(ch * chunk, std::min(n_kv, (ch + 1) * chunk), m, l);
            if (l == 0.0f) continue;
            const float m_new = std::fmax(big_m, m);
            const float s_old = std::exp(big_m - m_new);
            const float s_new = std::exp(m - m_new);
            for (int64_t i = 0; i < hd_v; ++i) {
              fin[i] = std::fma(fin[i], s_old, fp16_to_fp32(acc16[i]) * s_new);
            }
            big_s = std::fma(big_s, s_old, l * s_new);
            big_m = m_new;
          }
          const float inv = big_s == 0.0f ? 0.0f : 1.0f / big_s;
          for (int64_t i = 0; i < hd_v; ++i) o[i] = fin[i] * inv;
          continue;
        }
        float m = 0.0f;
        float l = 0.0f;
        walk(0, n_cells, m, l);
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        for (int64_t i = 0; i < hd_v; ++i) o[i] = fp16_to_fp32(acc16[i]) * inv;
      }
    };
    parallel_range(c.pool, n_tok * n_head, 1, body);
    return Ok{};
  }

  // f32 numerics over f32, f16 or quantized cells (f16 rows are widened exactly, and a
  // q8_0 / q4_0 row decodes exactly to d·q in f32, so a narrower cache gives the f32
  // result on the values it stored). One item is a block of up to kTokBlock
  // query tokens and up to two query heads of one KV head. Over f32 cells, with
  // attn_scores2_f32, both heads' scores come from one pass over the K rows; the block's
  // tokens take their chunks in turn, so the K and V rows of a chunk, which neighbouring
  // tokens mostly share, are still in L1 for the next token. Each (token, head) keeps its
  // own arithmetic, in its own order: the bits of a single-head, single-token walk.
  const bool f32_cells = kn.dtype == DType::kF32 && vn.dtype == DType::kF32;
  // Two query heads of one KV head per item: over f32 cells when attn_scores2_f32 reads
  // each K row once for both; over f16 / quantized cells always (each row is widened or
  // decoded once for both heads).
  const bool pair_heads = group >= 2 && (!f32_cells || k.attn_scores2_f32 != nullptr);
  // How a K or a V row of the window reaches f32: read in place (f32), widened (f16) or
  // dequantized (q8_0 / q4_0; one head's slice of a row is whole blocks, as
  // Model::check_params requires). K and V may hold different formats.
  struct RowFormat {
    DType dtype = DType::kF32;
    quant::DequantizeFn deq = nullptr;
    int64_t block = 1;
    int64_t bytes = 0;  // per block
  };
  RowFormat fmt_k, fmt_v;
  for (auto [cn, rf] : {std::pair{&kn, &fmt_k}, std::pair{&vn, &fmt_v}}) {
    rf->dtype = cn->dtype;
    if (cn->dtype == DType::kF32 || cn->dtype == DType::kF16) continue;
    const quant::TypeTraits* qt = quant::traits(cn->dtype);
    if (qt == nullptr || hd % qt->block_size != 0 || hd_v % qt->block_size != 0) {
      return make_error(fmt::format("attention '{}': no {} cells of head size {}", n.name,
                                    dtype_name(cn->dtype), hd));
    }
    rf->deq = qt->dequantize;
    if (cn->dtype == DType::kQ8_0 && k.q8_0_to_f32 != nullptr) rf->deq = k.q8_0_to_f32;
    if (cn->dtype == DType::kQ4_0 && k.q4_0_to_f32 != nullptr) rf->deq = k.q4_0_to_f32;
    rf->block = qt->block_size;
    rf->bytes = static_cast<int64_t>(qt->type_size);
  }
  const int64_t heads_per_item = pair_heads ? 2 : 1;
  const int64_t sets = (group + heads_per_item - 1) / heads_per_item;  // per KV head
  const int64_t n_blocks = (n_tok + kTokBlock - 1) / kTokBlock;
  auto run = [&](auto* kc, auto* vc) {
    auto body = [&](int64_t lo, int64_t hi, int32_t thread) {
      float* acc_base = scratch_all + thread * stride;  // acc [kTokBlock][2][hd_v]
      float* kcache = acc_base + kTokBlock * 2 * hd_v;  // [kRowCache][hd]
      float* vcache = kcache + kRowCache * hd;          // [kRowCache][hd_v]
      auto* cached_cell = reinterpret_cast<int32_t*>(vcache + kRowCache * hd_v);
      // a row slice in f32: read in place (f32), widened (f16) or decoded; off and len
      // count elements
      auto row = [&](const RowFormat& rf, const std::byte* base, int64_t off, int64_t len,
                     float* buf) -> const float* {
        if (rf.dtype == DType::kF32) return reinterpret_cast<const float*>(base) + off;
        if (rf.dtype == DType::kF16) {
          k.f16_to_f32(len, reinterpret_cast<const uint16_t*>(base) + off, buf);
        } else {
          rf.deq(base + off / rf.block * rf.bytes, buf, len);
        }
        return buf;
      };
      // The item's cache slot holding `cell`'s K and V slices of KV head kvh, filled on a
      // miss (the cache is emptied when an item starts).
      auto cached = [&](int64_t cell, int64_t kvh) -> int64_t {
        const int64_t slot = cell % kRowCache;
        if (cached_cell[slot] != cell) {
          float* kd = kcache + slot * hd;
          float* vd = vcache + slot * hd_v;
          const float* kr =
              row(fmt_k, reinterpret_cast<const std::byte*>(kc), cell * row_k + kvh * hd, hd, kd);
          if (kr != kd) std::copy(kr, kr + hd, kd);
          const float* vr = row(fmt_v, reinterpret_cast<const std::byte*>(vc),
                                cell * row_v + kvh * hd_v, hd_v, vd);
          if (vr != vd) std::copy(vr, vr + hd_v, vd);
          cached_cell[slot] = static_cast<int32_t>(cell);
        }
        return slot;
      };
      constexpr bool kF32Cells =
          std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(kc)>>, float>;
      float s[2][kChunk];
      struct Piece {
        int64_t cell;  // first cell of this piece of a run
        int64_t n;     // cells
        int64_t off;   // offset in the chunk's scores
      };
      Piece piece[kChunk];
      // One query token's walk: where it is in its window runs, and its heads' state.
      struct Walk {
        int64_t t;
        const int32_t* wrow;
        int64_t r, cur, run_end;
        float m[2], l[2];
        float* acc[2];
        const float* qr[2];
        bool done;
      };
      Walk walk[kTokBlock];
      // A token's next chunk: up to kChunk cells in window order, possibly spanning runs;
      // its cells (0: the window is walked).
      auto next_chunk = [&](Walk& w, Piece* pcs, int64_t& n_pieces) -> int64_t {
        int64_t filled = 0;
        while (filled < kChunk && w.r < n_runs) {
          if (w.cur == w.run_end) {
            if (++w.r < n_runs) {
              w.cur = w.wrow[2 * w.r];
              w.run_end = w.cur + w.wrow[2 * w.r + 1];
            }
            continue;
          }
          const int64_t take = std::min(kChunk - filled, w.run_end - w.cur);
          pcs[n_pieces++] = {.cell = w.cur, .n = take, .off = filled};
          filled += take;
          w.cur += take;
        }
        return filled;
      };
      // One chunk of f32 cells for nq query rows of KV head kvh (a token's heads, or a
      // block's tokens × heads): the scores sp[i], the running maximum m[i] (acc[i] and
      // l[i] rescaled when it grows), the weights expf(s − m) in sp[i], l[i] and acc[i]
      // summed on in cell order. Each row's arithmetic is that of its own loop; the
      // several-row kernels only read each K / V row once for all of them.
      [[maybe_unused]] auto chunk_rows_f32 = [&](int64_t nq, const float* const* qs,
                                                 float* const* accs, float* m, float* l,
                                                 float* const* sp, int64_t n_pieces, int64_t filled,
                                                 int64_t kvh, const auto* kc_, const auto* vc_) {
        float* op[2 * kTokBlock];
        const float* pp[2 * kTokBlock];
        for (int64_t pi = 0; pi < n_pieces; ++pi) {  // a run's cells in one call
          const Piece& pc = piece[pi];
          for (int64_t i = 0; i < nq; ++i) op[i] = sp[i] + pc.off;
          const float* kr = kc_ + pc.cell * row_k + kvh * hd;
          if (nq == 2 && k.attn_scores2_f32 != nullptr) {
            k.attn_scores2_f32(pc.n, hd, qs[0], qs[1], kr, row_k, scale, op[0], op[1]);
          } else if (nq > 1 && k.attn_scores_f32_multi != nullptr) {
            k.attn_scores_f32_multi(nq, qs, pc.n, hd, kr, row_k, scale, op);
          } else {
            for (int64_t i = 0; i < nq; ++i) {
              k.attn_scores_f32(pc.n, hd, qs[i], kr, row_k, scale, op[i]);
            }
          }
        }
        for (int64_t i = 0; i < nq; ++i) {
          const float mc = chunk_max(sp[i], filled);
          if (mc > m[i]) {
            const float f = std::exp(m[i] - mc);  // m = −inf on the first chunk: f = 0
            for (int64_t e = 0; e < hd_v; ++e) accs[i][e] *= f;
            l[i] *= f;
            m[i] = mc;
          }
          // the chunk's weights p = expf(s − m) (std::exp's bits per cell)
          k.attn_exp_f32(filled, sp[i], m[i], sp[i]);
        }
        for (int64_t e = 0; e < filled; ++e) {  // the rows' sums side by side
          for (int64_t i = 0; i < nq; ++i) l[i] += sp[i][e];
        }
        for (int64_t pi = 0; pi < n_pieces; ++pi) {
          // y = y + p·v per element in cell order: one call per run piece is bitwise
          // one call over the chunk
          const Piece& pc = piece[pi];
          for (int64_t i = 0; i < nq; ++i) pp[i] = sp[i] + pc.off;
          const float* vr = vc_ + pc.cell * row_v + kvh * hd_v;
          if (nq > 1 && k.attn_axpy_rows_f32_multi != nullptr) {
            k.attn_axpy_rows_f32_multi(nq, pc.n, hd_v, pp, vr, row_v, accs);
          } else {
            for (int64_t i = 0; i < nq; ++i) {
              k.attn_axpy_rows_f32(pc.n, hd_v, pp[i], vr, row_v, accs[i]);
            }
          }
        }
      };
      // The chunks every token of the block reaches alike — all of them when the tokens
      // see the same cells (a non-causal encoder's sequence), the ones before the
      // earliest token's last under a causal mask — are walked once for all nb · nh query
      // rows; the walks then part and go on one by one below. Each row keeps the
      // arithmetic of its own walk step for step (the multi kernels are bitwise per-row
      // loops; the sums l run side by side, each in cell order), but a chunk's K and V
      // rows are read once for all of them and the rows' dependency chains overlap.
      [[maybe_unused]] auto joint_walk = [&](Walk* wk, int64_t nb, int64_t nh, int64_t kvh,
                                             const auto* kc_, const auto* vc_) {
        if constexpr (kF32Cells) {
          constexpr int64_t kMaxRows = 2 * kTokBlock;
          const int64_t nq = nb * nh;
          const float* qs[kMaxRows];
          float* accs[kMaxRows];
          float sbuf[kMaxRows][kChunk];
          float* sp[kMaxRows];  // the scores / weights of the chunk
          float m[kMaxRows], l[kMaxRows];
          for (int64_t b = 0; b < nb; ++b) {
            for (int64_t j = 0; j < nh; ++j) {
              const int64_t i = b * nh + j;
              qs[i] = wk[b].qr[j];
              accs[i] = wk[b].acc[j];
              m[i] = wk[b].m[j];
              l[i] = wk[b].l[j];
              sp[i] = sbuf[i];
            }
          }
          Walk next[kTokBlock];
          Piece other[kChunk];
          for (;;) {
            // every walk's next chunk, taken only if all of them are the same cells
            int64_t n_pieces = 0;
            next[0] = wk[0];
            const int64_t filled = next_chunk(next[0], piece, n_pieces);
            bool same = filled > 0;
            for (int64_t b = 1; b < nb && same; ++b) {
              next[b] = wk[b];
              int64_t n_other = 0;
              same = next_chunk(next[b], other, n_other) == filled && n_other == n_pieces;
              for (int64_t pi = 0; pi < n_pieces && same; ++pi) {
                same = other[pi].cell == piece[pi].cell && other[pi].n == piece[pi].n;
              }
            }
            if (!same) break;
            std::copy(next, next + nb, wk);
            chunk_rows_f32(nq, qs, accs, m, l, sp, n_pieces, filled, kvh, kc_, vc_);
          }
          for (int64_t b = 0; b < nb; ++b) {
            for (int64_t j = 0; j < nh; ++j) {
              wk[b].m[j] = m[b * nh + j];
              wk[b].l[j] = l[b * nh + j];
            }
          }
        }
      };
      for (int64_t item = lo; item < hi; ++item) {
        // head-major: a thread's consecutive items walk one KV head's slices of the cells
        // (in L1 / L2 across the token blocks), whatever the number of blocks
        const int64_t tb = item % n_blocks;
        const int64_t hs = item / n_blocks;  // KV head · sets + set
        const int64_t kvh = hs / sets;
        const int64_t h0 = kvh * group + hs % sets * heads_per_item;
        const int64_t nh = std::min(heads_per_item, (kvh + 1) * group - h0);
        const int64_t t0 = tb * kTokBlock;
        const int64_t nb = std::min(kTokBlock, n_tok - t0);
        if constexpr (!kF32Cells) std::fill(cached_cell, cached_cell + kRowCache, int32_t{-1});
        for (int64_t b = 0; b < nb; ++b) {
          Walk& w = walk[b];
          w.t = t0 + b;
          w.wrow = win + w.t * 2 * n_runs;
          w.r = 0;
          w.cur = n_runs > 0 ? w.wrow[0] : 0;
          w.run_end = n_runs > 0 ? w.cur + w.wrow[1] : 0;
          w.done = false;
          for (int64_t j = 0; j < 2; ++j) {
            w.m[j] = -INFINITY;
            w.l[j] = 0.0f;
            w.acc[j] = acc_base + (b * 2 + j) * hd_v;
            w.qr[j] = q + (w.t * n_head + h0 + std::min(j, nh - 1)) * hd;
          }
          for (int64_t j = 0; j < nh; ++j) std::fill(w.acc[j], w.acc[j] + hd_v, 0.0f);
        }
        if constexpr (kF32Cells) {
          if (nb > 1) joint_walk(walk, nb, nh, kvh, kc, vc);
        }
        for (int64_t live = nb; live > 0;) {
          for (int64_t b = 0; b < nb; ++b) {
            Walk& w = walk[b];
            if (w.done) continue;
            int64_t n_pieces = 0;
            const int64_t filled = next_chunk(w, piece, n_pieces);
            if (filled == 0) {  // the window is walked: normalise and write the heads
              w.done = true;
              --live;
              for (int64_t j = 0; j < nh; ++j) {
                float* o = out + w.t * (n_head * hd_v) + (h0 + j) * hd_v;
                const float inv = w.l[j] == 0.0f ? 0.0f : 1.0f / w.l[j];  // 0: a padding row
                for (int64_t i = 0; i < hd_v; ++i) o[i] = w.acc[j][i] * inv;
              }
              continue;
            }
            if constexpr (kF32Cells) {
              float* const sp[2] = {s[0], s[1]};
              chunk_rows_f32(nh, w.qr, w.acc, w.m, w.l, sp, n_pieces, filled, kvh, kc, vc);
            } else {
              // cells of another type: each cell's K and V rows widened once into the
              // item's row cache, then the same steps cell by cell
              float mc[2] = {-INFINITY, -INFINITY};
              for (int64_t pi = 0; pi < n_pieces; ++pi) {
                const Piece& pc = piece[pi];
                for (int64_t i = 0; i < pc.n; ++i) {
                  const float* kr = kcache + cached(pc.cell + i, kvh) * hd;
                  for (int64_t j = 0; j < nh; ++j) {
                    const float v = k.dot_f32(hd, w.qr[j], kr) * scale;
                    s[j][pc.off + i] = v;
                    mc[j] = std::fmax(mc[j], v);
                  }
                }
              }
              for (int64_t j = 0; j < nh; ++j) {
                if (mc[j] > w.m[j]) {
                  const float f = std::exp(w.m[j] - mc[j]);  // m = −inf on the first chunk: f = 0
                  for (int64_t i = 0; i < hd_v; ++i) w.acc[j][i] *= f;
                  w.l[j] *= f;
                  w.m[j] = mc[j];
                }
              }
              for (int64_t j = 0; j < nh; ++j) k.attn_exp_f32(filled, s[j], w.m[j], s[j]);
              for (int64_t pi = 0; pi < n_pieces; ++pi) {
                const Piece& pc = piece[pi];
                for (int64_t i = 0; i < pc.n; ++i) {
                  const float* vr = vcache + cached(pc.cell + i, kvh) * hd_v;
                  for (int64_t j = 0; j < nh; ++j) {
                    const float p = s[j][pc.off + i];
                    w.l[j] += p;
                    k.axpy_f32(hd_v, p, vr, w.acc[j]);
                  }
                }
              }
            }
          }
        }
      }
    };
    parallel_range(c.pool, n_blocks * n_head_kv * sets, 1, body);
  };
  if (f32_cells) {
    run(c.data.as<const float>(n.src[1]), c.data.as<const float>(n.src[2]));
  } else {
    run(c.data.as<const std::byte>(n.src[1]), c.data.as<const std::byte>(n.src[2]));
  }
  return Ok{};
}

}  // namespace minfer::backend::cpu
