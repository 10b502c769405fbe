// Stage 7 (graph IR): names and layouts of the per-step input nodes every model shares.
// Invariant: inputs carry data only (filled after allocation each step); their shapes
// depend on GraphParams alone, so filling them never changes topology.
#pragma once

#include <string_view>

namespace minfer::graph {

// I32 [n_tokens]: token ids of the batch rows.
inline constexpr std::string_view kInputTokenIds = "token_ids";
// I32 [n_tokens]: position of each row within its sequence (what RoPE rotates by).
inline constexpr std::string_view kInputPositions = "positions";
// I32 [n_tokens]: KV cell each row's K/V is written to (kv_store), chosen by src/kv/.
inline constexpr std::string_view kInputKvCells = "kv_cells";
// I32 [2 * n_runs, n_tokens]: the cells each query may read. Row t lists n_runs pairs
// (first_cell, n_cells) in ascending position order; unused pairs are (0, 0). The
// attention kernel reads exactly these cells, so the graph never depends on how far
// the cache has grown (src/kv/cells.h builds it; CParams::window sets n_runs).
inline constexpr std::string_view kInputKvWindow = "kv_window";
// I32 [2 * n_runs, n_tokens]: the same runs cut to a sliding window (positions
// > pos - n_swa), read by the sliding-window layers of models that have them (gemma3).
inline constexpr std::string_view kInputKvWindowSwa = "kv_window_swa";
// I32 [n_tokens]: token type (segment) of each row, read by cross-encoders (bert with a
// classification head): 0 for the first text of a pair, 1 for the second.
inline constexpr std::string_view kInputTokenTypes = "token_types";
// I32 [n_out]: rows kept for the output tail when n_out < n_tokens (prefill).
inline constexpr std::string_view kInputTailIds = "tail_ids";

}  // namespace minfer::graph
