// Stage 15 (the loop): the multi-sequence forward — a Batch of (token, seq, pos, logits)
// rows, padded to a row bucket, placed in the shared cell store, each row attending to
// its own sequence's cells (ARCHITECTURE §2b).
// Invariants: topology reads only (bucketed rows, bucketed logit rows, window runs);
// padding rows store nothing (cell -1) and read nothing (an empty window), so they
// cannot change a real row's bits; every check runs before anything is placed.
#include <fmt/format.h>

#include <algorithm>

#include "alloc/allocator.h"
#include "core/check.h"
#include "engine/batch.h"
#include "engine/engine.h"
#include "graph/input_names.h"

namespace minfer::engine {

uint32_t bucket_rows(uint32_t n) {
  if (n <= 16) {
    uint32_t b = 1;
    while (b < n) b <<= 1;
    return b;
  }
  if (n <= 64) return (n + 15) / 16 * 16;
  return (n + 63) / 64 * 64;
}

std::span<const float> BatchLogits::row(size_t row) const {
  MINFER_CHECK(row < slot_of_row_.size() && slot_of_row_[row] >= 0,
               "BatchLogits::row: batch row %zu did not ask for logits", row);
  return {data_ + static_cast<size_t>(slot_of_row_[row]) * static_cast<size_t>(n_vocab_),
          static_cast<size_t>(n_vocab_)};
}

Result<BatchLogits> Context::decode(const Batch& batch) {
  const std::span<const BatchRow> rows = batch.rows();
  const size_t n = rows.size();
  if (n == 0) return make_error("decode: empty batch");
  if (batch.n_logits() == 0) return make_error("decode: no row asks for logits");
  if (cache_ == nullptr) return make_error("decode: no context set (set_context first)");
  const int32_t n_vocab = static_cast<int32_t>(model_->hparams().n_vocab);
  for (size_t i = 0; i < n; ++i) {
    const BatchRow& r = rows[i];
    if (r.seq < 0 || static_cast<uint32_t>(r.seq) >= context_.n_seq_max) {
      return make_error(fmt::format("decode: sequence {} (row {}) outside [0, {})", r.seq, i,
                                    context_.n_seq_max));
    }
    if (r.pos < 0 || static_cast<uint32_t>(r.pos) >= context_.n_ctx_seq) {
      return make_error(
          fmt::format("decode: position {} (row {}) is outside the context (n_ctx {})", r.pos, i,
                      context_.n_ctx_seq));
    }
    if (r.token < 0 || r.token >= n_vocab) {
      return make_error(fmt::format(
          "decode: token id {} (row {}) outside the vocabulary (n_vocab {})", r.token, i, n_vocab));
    }
  }

  const uint32_t nt =
      context_.pad_rows ? bucket_rows(static_cast<uint32_t>(n)) : static_cast<uint32_t>(n);
  const uint32_t n_out = context_.pad_rows ? bucket_rows(batch.n_logits()) : batch.n_logits();
  // Per-step scratch grows only when a larger bucket arrives.
  batch_.resize(n);
  cells_.resize(nt);
  tokens_.resize(nt);
  types_.resize(nt);
  positions_.resize(nt);
  slot_of_row_.resize(n);
  tail_.resize(n_out);
  uint32_t slot = 0;
  for (size_t i = 0; i < n; ++i) {
    batch_[i] = kv::KvToken{.seq = rows[i].seq, .pos = rows[i].pos};
    tokens_[i] = rows[i].token;
    types_[i] = rows[i].type;
    positions_[i] = rows[i].pos;
    slot_of_row_[i] = rows[i].logits ? static_cast<int32_t>(slot) : -1;
    if (rows[i].logits) tail_[slot++] = static_cast<int32_t>(i);
  }
  for (size_t i = n; i < nt; ++i) {  // padding rows: token 0 at position 0, no cell
    tokens_[i] = 0;
    types_[i] = 0;
    positions_[i] = 0;
    cells_[i] = -1;
  }
  for (uint32_t s = slot; s < n_out; ++s) tail_[s] = tail_[0];  // padding logit rows

  // Place first (a row must see its own cell and the earlier rows of its sequence),
  // then the windows; more runs than the layout has raises it (a new graph, sticky).
  MINFER_TRY_STATUS(kv_->place_into(batch_, std::span<int32_t>(cells_).first(n)));
  const bool causal = model_->hparams().causal;  // encoders: each row reads its whole sequence
  int32_t n_runs = std::max(context_.n_runs, 1);
  MINFER_TRY(const int32_t needed, kv_->runs_needed(batch_, causal));
  if (needed > n_runs) {
    int32_t b = 1;
    while (b < needed) b <<= 1;
    n_runs = b;
    context_.n_runs = b;
  }
  const size_t stride = 2 * static_cast<size_t>(n_runs);
  window_.assign(stride * nt, 0);  // padding rows keep (0, 0) runs: they read nothing
  auto undo = [&](const Error& e) -> Error {
    for (size_t i = 0; i < n; ++i) kv_->seq_rm(rows[i].seq, rows[i].pos, rows[i].pos + 1);
    return e;
  };
  if (Status st = kv_->window_into(batch_, {.n_runs = n_runs, .causal = causal},
                                   std::span<int32_t>(window_).first(stride * n));
      !st.ok()) {
    return undo(st.error());
  }
  const auto n_swa = static_cast<int32_t>(model_->hparams().n_swa);
  if (n_swa > 0) {  // the sliding layers' window: the same runs cut to the last n_swa positions
    window_swa_.assign(stride * nt, 0);
    if (Status st = kv_->window_into(batch_, {.n_runs = n_runs, .causal = causal, .sliding = n_swa},
                                     std::span<int32_t>(window_swa_).first(stride * n));
        !st.ok()) {
      return undo(st.error());
    }
  }

  const graph::GraphParams params = params_for(nt, n_out, n_runs);
  auto prepared = prepare(params);
  if (!prepared) return undo(prepared.error());
  const graph::ComputeGraph& g = **prepared;
  alloc::Allocator& memory = cache_->memory_as<alloc::Allocator>();
  Status filled = [&]() -> Status {
    MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputTokenIds, tokens_));
    MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputPositions, positions_));
    MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputKvCells, cells_));
    MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputKvWindow, window_));
    if (n_swa > 0)
      MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputKvWindowSwa, window_swa_));
    if (model_->hparams().token_type_input)
      MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputTokenTypes, types_));
    if (n_out < nt) MINFER_TRY_STATUS(memory.fill_input_i32(g, graph::kInputTailIds, tail_));
    return Ok{};
  }();
  if (!filled.ok()) return undo(filled.error());
  MINFER_TRY_STATUS(sched_.execute(g, memory));
  stats_.executes++;
  stats_.graph_uid = g.uid();
  // Logits on the host: the output's own memory when the host may read it, else one
  // `get` into a context buffer (grown only when a larger output first appears).
  const graph::NodeId out_id = g.outputs().front();
  const graph::Node& out_node = g.node(out_id);
  const float* logits = nullptr;
  if (memory.host_accessible(out_node.backend)) {
    logits = memory.data_as<const float>(g, out_id);
  } else {
    const auto count = static_cast<size_t>(out_node.shape.n_elements());
    if (logits_host_.size() < count) logits_host_.resize(count);
    MINFER_TRY_STATUS(memory.read_node(
        g, out_id, std::as_writable_bytes(std::span<float>(logits_host_).first(count))));
    logits = logits_host_.data();
  }
  if (n_out == nt) {
    // No tail gather: output row i is batch row i; map the logit rows to their rows.
    for (size_t i = 0; i < n; ++i) {
      if (slot_of_row_[i] >= 0) slot_of_row_[i] = static_cast<int32_t>(i);
    }
  }
  // An encoder's output rows are hidden states (HParams::embeddings_out), n_embd wide;
  // a cross-encoder's are its n_cls_out scores.
  const model::HParams& hp = model_->hparams();
  const int32_t width = hp.n_cls_out > 0    ? static_cast<int32_t>(hp.n_cls_out)
                        : hp.embeddings_out ? static_cast<int32_t>(hp.n_embd)
                                            : n_vocab;
  return BatchLogits(logits, width, slot_of_row_);
}

}  // namespace minfer::engine
