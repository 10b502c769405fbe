// Stage 8 (graph reuse): GraphParams / CParams — the ONLY inputs to graph topology.
// Invariants: a builder is a pure function of GraphParams (equal params ⇒ structurally
// identical graphs); token ids, positions, cells, windows and n_past are input DATA
// and never appear here; every field here can change the node list (else it is data).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"
#include "graph/ops.h"

namespace minfer::graph {

// Prefill (many tokens, tail-row reduction to n_out) vs decode (one token per
// sequence). Redundant with n_tokens == 1 today, but it names the intent, as
// llama.cpp's llm_graph_params does, and lets a batch of decodes be a Decode graph.
enum class GraphType : uint8_t { kPrefill, kDecode };

// Element format of a KV region: it sizes every cell, so a graph built for one format
// never serves another. q8_0 / q4_0 rows are quantized as they are stored.
enum class KvFormat : uint8_t { kF32, kF16, kQ8_0, kQ4_0 };

// The formats of the K and of the V regions (llama.cpp's -ctk / -ctv); they may differ.
// One format converts to the pair holding it for both.
struct KvFormats {
  KvFormat k = KvFormat::kF32;
  KvFormat v = KvFormat::kF32;

  constexpr KvFormats() = default;
  constexpr KvFormats(KvFormat both) : k(both), v(both) {}  // NOLINT(google-explicit-constructor)
  constexpr KvFormats(KvFormat k_format, KvFormat v_format) : k(k_format), v(v_format) {}
  bool operator==(const KvFormats&) const = default;
};

// How attention accumulates over the KV window (part of the numerics, so of topology).
//  kF32:    f32 scores and f32 accumulator, softmax rescaled at fixed 64-cell chunks.
//  kGgmlF16: llama.cpp's CPU flash-attention vector path, reproduced: Q rounded to f16,
//           Q·K in f32 lanes, per-cell online softmax, the V accumulator rounded to f16
//           after every step (in f16 arithmetic over 128-element steps, as llama.cpp's
//           native build on an AVX512-FP16 CPU runs it). Needs K and V f16, q8_0 or q4_0
//           (quantized: its per-row kernel over quantized rows, ops_attention.cpp). Opt-in, for
//           token-exact agreement with llama.cpp; it is still batch- and thread-independent
//           (invariant 8).
enum class AttnNumerics : uint8_t { kF32, kGgmlF16 };

// Fusion-pass switches. They change which ops the graph contains, so they are part of
// the reuse identity: flipping one (an A/B env toggle) must force a rebuild.
struct FusionFlags {
  bool rms_norm_mul = true;  // rms_norm(x) * w → rms_norm_mul(x, w)

  bool operator==(const FusionFlags&) const = default;
};

// Shape of the attention window input (graph/input_names.h, kInputKvWindow): each
// query row holds n_runs (first_cell, n_cells) pairs. It is topology (the input's
// shape) and is chosen from the KV reservations, never from n_past: a single
// contiguous sequence needs 1 run; shared prefixes or fragmented cells need more.
struct WindowLayout {
  int32_t n_runs = 1;

  bool operator==(const WindowLayout&) const = default;
};

// Which backend runs which layers (-ngl N): the last `n_layers` repeating layers — their
// nodes, weights and KV regions — run on backend `device`, and so does the output head
// when `head` is set (llama.cpp offloads the head once N exceeds the layer count); the
// step inputs and the input layer (token embedding) stay on the CPU. It changes every
// node's backend, so it is part of the reuse identity (graph::place_layers applies it).
struct LayerPlacement {
  BackendId device = kBackendCpu;
  int32_t n_layers = 0;
  bool head = false;

  bool operator==(const LayerPlacement&) const = default;
};

// Runtime knobs that reach into topology.
struct CParams {
  uint32_t n_ctx = 0;   // KV cells per region; sizes the persistent regions
  WindowLayout window;  // attention window input layout
  FusionFlags fusion;   // fusion-pass switches
  KvFormats kv_format;  // K and V region formats
  AttnNumerics attn_numerics = AttnNumerics::kF32;
  // llama.cpp's quantized-KV rotation (its attn_rot): where K (V) is stored quantized and
  // the head size is a multiple of 64, Q and K (V, and the attention output back) are
  // multiplied by an orthonormal Walsh-Hadamard matrix (model/layers.h kv_rotation).
  // On under --numerics llamacpp, as llama.cpp by default; MINFER_KV_ROTATION overrides.
  bool kv_rotation = false;
  LayerPlacement placement;

  bool operator==(const CParams&) const = default;
};

struct GraphParams {
  uint32_t n_tokens = 0;  // rows in this forward (all sequences together)
  uint32_t n_out = 0;     // rows whose logits are produced (1..n_tokens)
  GraphType gtype = GraphType::kPrefill;
  CParams cparams;

  bool operator==(const GraphParams&) const = default;
};

// Rejects params no builder can honour (zero tokens, n_out > n_tokens, n_ctx == 0,
// n_tokens > n_ctx, n_runs < 1) — an Error, since params come from user input.
Status validate(const GraphParams& params);

std::string_view graph_type_name(GraphType t);
std::string_view kv_format_name(KvFormat f);
// "f16" when K and V share a format, else "q8_0/f16" (K/V).
std::string kv_formats_name(KvFormats f);
std::string_view attn_numerics_name(AttnNumerics a);
// Parses "f32" / "f16" / "q8_0" / "q4_0" (MINFER_CACHE_TYPE, --cache-type); unknown → Error.
Result<KvFormat> parse_kv_format(std::string_view text);

std::string to_string(const GraphParams& params);  // one line, for rebuild traces

}  // namespace minfer::graph
