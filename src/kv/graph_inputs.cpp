// Stage 10 (KV cells): declaring KV inputs and regions in a graph.
// Invariant: one definition of the kv input names and shapes for every model.
#include "kv/graph_inputs.h"

#include "core/check.h"
#include "graph/input_names.h"
#include "kv/cells.h"

namespace minfer::kv {

KvGraphInputs declare_kv_inputs(graph::GraphBuilder& b, const graph::GraphParams& p) {
  const int64_t nt = p.n_tokens;
  const int64_t n_runs = p.cparams.window.n_runs;
  KvGraphInputs in;
  in.cells = b.input(graph::kInputKvCells, DType::kI32, {nt});  // I32 [n_tokens]
  in.window =
      b.input(graph::kInputKvWindow, DType::kI32, {2 * n_runs, nt});  // I32 [2·n_runs, n_tokens]
  return in;
}

graph::NodeId declare_swa_window(graph::GraphBuilder& b, const graph::GraphParams& p) {
  const int64_t n_runs = p.cparams.window.n_runs;
  return b.input(graph::kInputKvWindowSwa, DType::kI32,
                 {2 * n_runs, int64_t{p.n_tokens}});  // I32 [2·n_runs, n_tokens]
}

KvLayerRegions declare_kv_regions(graph::GraphBuilder& b, const graph::GraphParams& p,
                                  int32_t layer, int64_t n_embd_k, int64_t n_embd_v) {
  auto k_dtype = kv_dtype(p.cparams.kv_format.k);
  auto v_dtype = kv_dtype(p.cparams.kv_format.v);
  MINFER_CHECK(k_dtype.ok() && v_dtype.ok(), "declare_kv_regions: %s",
               !k_dtype.ok()   ? k_dtype.error().message.c_str()
               : !v_dtype.ok() ? v_dtype.error().message.c_str()
                               : "");
  const int64_t n_ctx = p.cparams.n_ctx;
  KvLayerRegions r;
  r.k = b.kv_region(layer, graph::KvKind::kK, *k_dtype, {n_embd_k, n_ctx});  // [n_embd_k, n_ctx]
  r.v = b.kv_region(layer, graph::KvKind::kV, *v_dtype, {n_embd_v, n_ctx});  // [n_embd_v, n_ctx]
  return r;
}

}  // namespace minfer::kv
