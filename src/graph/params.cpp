// Stage 8 (graph reuse): validation and printing of GraphParams.
// Invariant: validate() accepts exactly the params a deterministic builder can honour.
#include "graph/params.h"

#include <fmt/format.h>

namespace minfer::graph {

Status validate(const GraphParams& p) {
  if (p.n_tokens == 0) return make_error("graph params: n_tokens is 0");
  if (p.n_out == 0 || p.n_out > p.n_tokens) {
    return make_error(
        fmt::format("graph params: n_out {} outside 1..n_tokens ({})", p.n_out, p.n_tokens));
  }
  if (p.cparams.n_ctx == 0) return make_error("graph params: n_ctx is 0");
  if (p.n_tokens > p.cparams.n_ctx) {
    return make_error(
        fmt::format("graph params: n_tokens {} exceeds n_ctx {}", p.n_tokens, p.cparams.n_ctx));
  }
  if (p.cparams.window.n_runs < 1) {
    return make_error(fmt::format("graph params: window n_runs {} < 1", p.cparams.window.n_runs));
  }
  if (p.cparams.attn_numerics == AttnNumerics::kGgmlF16 &&
      (p.cparams.kv_format.k == KvFormat::kF32 || p.cparams.kv_format.v == KvFormat::kF32)) {
    return make_error(
        fmt::format("graph params: attention numerics ggml-f16 needs an f16, q8_0 or q4_0 "
                    "KV cache (kv_format is {})",
                    kv_formats_name(p.cparams.kv_format)));
  }
  return Ok{};
}

std::string_view graph_type_name(GraphType t) {
  return t == GraphType::kDecode ? "decode" : "prefill";
}

std::string_view kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::kF32:
      return "f32";
    case KvFormat::kF16:
      return "f16";
    case KvFormat::kQ8_0:
      return "q8_0";
    case KvFormat::kQ4_0:
      return "q4_0";
  }
  return "?";
}

std::string kv_formats_name(KvFormats f) {
  if (f.k == f.v) return std::string(kv_format_name(f.k));
  return fmt::format("{}/{}", kv_format_name(f.k), kv_format_name(f.v));
}

std::string_view attn_numerics_name(AttnNumerics a) {
  return a == AttnNumerics::kGgmlF16 ? "ggml-f16" : "f32";
}

Result<KvFormat> parse_kv_format(std::string_view text) {
  for (KvFormat f : {KvFormat::kF32, KvFormat::kF16, KvFormat::kQ8_0, KvFormat::kQ4_0}) {
    if (text == kv_format_name(f)) return f;
  }
  return make_error(
      fmt::format("unknown KV cache type '{}' (expected f32, f16, q8_0 or q4_0)", text));
}

std::string to_string(const GraphParams& p) {
  const CParams& c = p.cparams;
  return fmt::format(
      "{{n_tokens={} n_out={} gtype={} n_ctx={} window_runs={} fuse_rms_norm_mul={} "
      "kv_format={} kv_rot={} attn={} offload={}@{}{}}}",
      p.n_tokens, p.n_out, graph_type_name(p.gtype), c.n_ctx, c.window.n_runs,
      c.fusion.rms_norm_mul, kv_formats_name(c.kv_format), c.kv_rotation,
      attn_numerics_name(c.attn_numerics), c.placement.n_layers, c.placement.device,
      c.placement.head ? "+head" : "");
}

}  // namespace minfer::graph
