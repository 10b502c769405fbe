// Stage 3b (convert): Hugging Face tensor names → GGUF names, the per-tensor type rule
// and the Llama Q/K row order. Follows convert_hf_to_gguf.py (ModelBase.prepare_tensors,
// LlamaModel.modify_tensors / permute, BertModel.filter_tensors) and gguf-py's tensor
// name map.
#include "convert/tensors.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <map>
#include <optional>

#include "core/fp16.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace minfer::convert {
namespace {

// Per-layer tensors: HF suffix after "model.layers.N." → GGUF suffix after "blk.N.".
struct LayerName {
  const char* hf;
  const char* gguf;
};
constexpr LayerName kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// BERT's per-layer tensors: HF stem after "encoder.layer.N." → GGUF stem after "blk.N."
// (each with .weight and .bias), as gguf-py's tensor map names them for MODEL_ARCH.BERT.
constexpr LayerName kBertLayerNames[] = {
    {"attention.self.query", "attn_q"},
    {"attention.self.key", "attn_k"},
    {"attention.self.value", "attn_v"},
    {"attention.output.dense", "attn_output"},
    {"attention.output.LayerNorm", "attn_output_norm"},
    {"intermediate.dense", "ffn_up"},
    {"output.dense", "ffn_down"},
    {"output.LayerNorm", "layer_output_norm"},
};
constexpr LayerName kBertGlobalNames[] = {
    {"embeddings.word_embeddings", "token_embd"},
    {"embeddings.position_embeddings", "position_embd"},
    {"embeddings.token_type_embeddings", "token_types"},
    {"embeddings.LayerNorm", "token_embd_norm"},
};

// BertModel.filter_tensors and the tensor map: a "bert." prefix (BertFor* checkpoints)
// and TF-style ".gamma"/".beta" are renamed; position ids, the pooler and the
// pre-training heads (cls.predictions, cls.seq_relationship) are dropped.
Result<std::optional<std::string>> bert_gguf_name(std::string hf, const HParams& h,
                                                  uint32_t* layer) {
  const std::string original = hf;
  if (hf.starts_with("bert.")) hf.erase(0, 5);
  if (hf.ends_with(".gamma")) hf.replace(hf.size() - 6, 6, ".weight");
  if (hf.ends_with(".beta")) hf.replace(hf.size() - 5, 5, ".bias");
  if (h.keep_pooler && (hf == "pooler.dense.weight" || hf == "pooler.dense.bias")) {
    return std::optional<std::string>("cls" + hf.substr(12));  // the rank head's dense + tanh
  }
  if (hf == "embeddings.position_ids" || hf == "pooler.dense.weight" || hf == "pooler.dense.bias" ||
      hf.starts_with("cls.predictions") || hf.starts_with("cls.seq_relationship")) {
    return std::optional<std::string>();
  }
  // BertModel.modify_tensors: with labels, BertForSequenceClassification's single
  // projection is the classifier output (CLS_OUT); gguf-py maps a bare "classifier"
  // (jina's dense layer) to CLS, which a BERT classifier without labels is not.
  if (hf == "classifier.weight" || hf == "classifier.bias") {
    if (h.cls_labels.empty()) {
      return make_error(
          fmt::format("tensor '{}': a classifier needs labels in config.json \"id2label\" (the "
                      "placeholder pair LABEL_0, LABEL_1 counts as none)",
                      original));
    }
    return std::optional<std::string>("cls.output" + hf.substr(10));
  }
  const size_t dot = hf.rfind('.');
  const std::string_view suffix =
      dot == std::string::npos ? std::string_view() : std::string_view(hf).substr(dot);
  if (suffix == ".weight" || suffix == ".bias") {
    const std::string_view stem = std::string_view(hf).substr(0, dot);
    for (const LayerName& n : kBertGlobalNames) {
      if (stem == n.hf)
        return std::optional<std::string>(std::string(n.gguf) + std::string(suffix));
    }
    constexpr std::string_view kPrefix = "encoder.layer.";
    if (stem.starts_with(kPrefix)) {
      const char* p = stem.data() + kPrefix.size();
      const char* end = stem.data() + stem.size();
      uint32_t bid = 0;
      auto [q, ec] = std::from_chars(p, end, bid);
      if (ec == std::errc() && q != p && q < end && *q == '.' && bid < h.n_layer) {
        const std::string_view rest(q + 1, end);
        for (const LayerName& n : kBertLayerNames) {
          if (rest != n.hf) continue;
          *layer = bid;
          return std::optional<std::string>(fmt::format("blk.{}.{}{}", bid, n.gguf, suffix));
        }
      }
    }
  }
  return make_error(
      fmt::format("tensor '{}' has no GGUF name for {} (unexpected for this architecture)",
                  original, h.hf_arch));
}

// The GGUF name of an HF tensor; nullopt for tensors the converter drops (RoPE caches);
// an error for names this architecture does not have.
Result<std::optional<std::string>> gguf_name(const std::string& hf, const HParams& h,
                                             uint32_t* layer) {
  if (hf.ends_with(".rotary_emb.inv_freq") || hf.ends_with(".attention.masked_bias") ||
      hf.ends_with(".attention.bias")) {
    return std::optional<std::string>();
  }
  if (h.arch == Arch::kBert) return bert_gguf_name(hf, h, layer);
  if (hf == "model.embed_tokens.weight") return std::optional<std::string>("token_embd.weight");
  if (hf == "model.norm.weight") return std::optional<std::string>("output_norm.weight");
  if (hf == "lm_head.weight") return std::optional<std::string>("output.weight");
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf.starts_with(kPrefix)) {
    const char* p = hf.data() + kPrefix.size();
    const char* end = hf.data() + hf.size();
    uint32_t bid = 0;
    auto [q, ec] = std::from_chars(p, end, bid);
    if (ec == std::errc() && q != p && q < end && *q == '.' && bid < h.n_layer) {
      const std::string_view rest(q + 1, end);
      for (const LayerName& n : kLayerNames) {
        if (rest != n.hf) continue;
        const bool qk_norm =
            rest.find("_norm.") != std::string_view::npos && rest.starts_with("self_attn.");
        if (qk_norm && h.arch != Arch::kQwen3) break;  // only Qwen3 has per-head norms
        *layer = bid;
        return std::optional<std::string>(fmt::format("blk.{}.{}", bid, n.gguf));
      }
    }
  }
  return make_error(fmt::format(
      "tensor '{}' has no GGUF name for {} (unexpected for this architecture)", hf, h.hf_arch));
}

// The PyTorch-order shape config.json implies for a GGUF tensor name (without "blk.N."),
// nullopt for a name no supported architecture has ("token_embd.bias").
std::optional<std::vector<uint64_t>> expected_shape(std::string_view base, const HParams& h) {
  const uint64_t q = uint64_t{h.n_head} * h.n_embd_head, kv = uint64_t{h.n_head_kv} * h.n_embd_head;
  const std::map<std::string_view, std::vector<uint64_t>> shapes = {
      {"token_embd.weight", {h.n_vocab, h.n_embd}},
      {"output.weight", {h.n_vocab, h.n_embd}},
      {"output_norm.weight", {h.n_embd}},
      {"attn_norm.weight", {h.n_embd}},
      {"ffn_norm.weight", {h.n_embd}},
      {"attn_q.weight", {q, h.n_embd}},
      {"attn_k.weight", {kv, h.n_embd}},
      {"attn_v.weight", {kv, h.n_embd}},
      {"attn_output.weight", {h.n_embd, q}},
      {"attn_q.bias", {q}},
      {"attn_k.bias", {kv}},
      {"attn_v.bias", {kv}},
      {"attn_q_norm.weight", {h.n_embd_head}},
      {"attn_k_norm.weight", {h.n_embd_head}},
      {"ffn_gate.weight", {h.n_ff, h.n_embd}},
      {"ffn_up.weight", {h.n_ff, h.n_embd}},
      {"ffn_down.weight", {h.n_embd, h.n_ff}},
      // BERT
      {"position_embd.weight", {h.n_ctx, h.n_embd}},
      {"token_types.weight", {h.n_token_types, h.n_embd}},
      {"token_embd_norm.weight", {h.n_embd}},
      {"token_embd_norm.bias", {h.n_embd}},
      {"attn_output.bias", {h.n_embd}},
      {"attn_output_norm.weight", {h.n_embd}},
      {"attn_output_norm.bias", {h.n_embd}},
      {"ffn_up.bias", {h.n_ff}},
      {"ffn_down.bias", {h.n_embd}},
      {"layer_output_norm.weight", {h.n_embd}},
      {"layer_output_norm.bias", {h.n_embd}},
      {"cls.weight", {h.n_embd, h.n_embd}},
      {"cls.bias", {h.n_embd}},
      {"cls.output.weight", {h.cls_labels.size(), h.n_embd}},
      {"cls.output.bias", {h.cls_labels.size()}},
  };
  const auto it = shapes.find(base);
  if (it == shapes.end()) return std::nullopt;
  return it->second;
}

// Tensors llama.cpp's loader needs for each architecture (per layer, then global).
std::vector<std::string> required_names(const HParams& h) {
  if (h.arch == Arch::kBert) {
    std::vector<std::string> out = {"token_embd.weight", "position_embd.weight",
                                    "token_types.weight", "token_embd_norm.weight",
                                    "token_embd_norm.bias"};
    for (uint32_t i = 0; i < h.n_layer; ++i) {
      for (const LayerName& n : kBertLayerNames) {
        for (const char* suffix : {".weight", ".bias"}) {
          out.push_back(fmt::format("blk.{}.{}{}", i, n.gguf, suffix));
        }
      }
    }
    return out;
  }
  std::vector<std::string> out = {"token_embd.weight", "output_norm.weight"};
  // An untied model without lm_head would silently reuse the embeddings.
  if (!h.tied_embeddings) out.push_back("output.weight");
  for (uint32_t i = 0; i < h.n_layer; ++i) {
    std::vector<const char*> per = {"attn_norm.weight", "attn_q.weight",      "attn_k.weight",
                                    "attn_v.weight",    "attn_output.weight", "ffn_norm.weight",
                                    "ffn_gate.weight",  "ffn_up.weight",      "ffn_down.weight"};
    if (h.arch == Arch::kQwen2)
      per.insert(per.end(), {"attn_q.bias", "attn_k.bias", "attn_v.bias"});
    if (h.arch == Arch::kQwen3) per.insert(per.end(), {"attn_q_norm.weight", "attn_k_norm.weight"});
    for (const char* p : per) out.push_back(fmt::format("blk.{}.{}", i, p));
  }
  return out;
}

// prepare_tensors' rule: 1-D tensors, norms, position and token-type embeddings
// (POS_EMBD, TOKEN_TYPES) and anything that is not a ".weight" stay F32; the rest take
// the out type, and a row that is not a whole number of Q8_0 blocks falls back to F16
// (the converter's QuantError fallback).
DType tensor_type(const std::string& name, size_t n_dims, uint64_t ne0, OutType ot) {
  if (n_dims <= 1 || name.ends_with("_norm.weight") || !name.ends_with(".weight") ||
      name == "position_embd.weight" || name == "token_types.weight") {
    return DType::kF32;
  }
  switch (ot) {
    case OutType::kF32:
      return DType::kF32;
    case OutType::kBF16:
      return DType::kBF16;
    case OutType::kQ8_0:
      return ne0 % 32 == 0 ? DType::kQ8_0 : DType::kF16;
    case OutType::kF16:
    case OutType::kAuto:
      break;
  }
  return DType::kF16;
}

// Source elements → f32 (the converter computes in f32 for every target but a
// same-type copy, and f16 → f32 → f16 is exact).
void decode(const StTensor& t, float* dst) {
  const uint8_t* p = t.data.data();
  for (uint64_t i = 0; i < t.n_elements; ++i) {
    switch (t.dtype) {
      case StDType::kF32:
        std::memcpy(&dst[i], p + 4 * i, 4);
        break;
      case StDType::kF16: {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = fp16_to_fp32(v);
        break;
      }
      case StDType::kBF16: {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = bf16_to_fp32(v);
        break;
      }
      case StDType::kOther:
        MINFER_CHECK(false, "decode of an unsupported dtype");
    }
  }
}

}  // namespace

OutType resolve_outtype(OutType requested, const Checkpoint& ck) {
  if (requested != OutType::kAuto) return requested;
  for (const StTensor* t : ck.tensors()) {
    if (t->shape.size() < 2) continue;
    if (t->dtype == StDType::kBF16) return OutType::kBF16;
    if (t->dtype == StDType::kF16) return OutType::kF16;
  }
  return OutType::kF16;
}

Result<std::vector<PlannedTensor>> plan_tensors(const Checkpoint& ck, OutType outtype) {
  const HParams& h = ck.hparams();
  std::vector<PlannedTensor> plan;
  std::map<std::string, const StTensor*> by_name;
  for (const StTensor* t : ck.tensors()) {
    uint32_t layer = 0;
    MINFER_TRY(const auto name, gguf_name(t->name, h, &layer));
    if (!name) continue;
    if (t->dtype == StDType::kOther) {
      return make_error(
          fmt::format("tensor '{}' has dtype {}; only F32, F16 and BF16 are supported", t->name,
                      t->dtype_name));
    }
    const std::string base =
        name->starts_with("blk.") ? name->substr(name->find('.', 4) + 1) : *name;
    const std::optional<std::vector<uint64_t>> want_or = expected_shape(base, h);
    if (!want_or) {
      return make_error(
          fmt::format("tensor '{}' has no GGUF name for {} (unexpected for this "
                      "architecture)",
                      t->name, h.hf_arch));
    }
    const std::vector<uint64_t>& want = *want_or;
    if (t->shape != want) {
      return make_error(fmt::format("tensor '{}' has shape [{}], config.json implies [{}]", t->name,
                                    fmt::join(t->shape, ", "), fmt::join(want, ", ")));
    }
    PlannedTensor p{.src = t, .name = *name};
    p.dims.assign(t->shape.rbegin(), t->shape.rend());
    p.type = tensor_type(p.name, t->shape.size(), p.dims[0], outtype);
    // HF stores Llama's q/k rows in the rotate-half order; llama.cpp's RoPE pairs
    // adjacent elements, so the converter regroups each head's rows (LlamaModel.permute).
    if (h.arch == Arch::kLlama) {
      if (base.starts_with("attn_q.")) p.permute_heads = h.n_head;
      if (base.starts_with("attn_k.")) p.permute_heads = h.n_head_kv;
    }
    by_name[p.name] = t;
    plan.push_back(std::move(p));
  }
  for (const std::string& r : required_names(h)) {
    if (!by_name.contains(r)) {
      return make_error(
          fmt::format("the checkpoint has no tensor for '{}', which {} needs", r, h.hf_arch));
    }
  }
  return plan;
}

Status encode_tensor(const PlannedTensor& t, std::vector<float>& scratch,
                     std::vector<uint8_t>& out) {
  const StTensor& s = *t.src;
  scratch.resize(s.n_elements);
  decode(s, scratch.data());
  if (t.permute_heads != 0) {
    // rows [n_head, 2, half, cols] → [n_head, half, 2, cols]
    const uint64_t rows = s.shape[0];
    const uint64_t cols = s.n_elements / rows;
    const uint64_t per_head = rows / t.permute_heads, half = per_head / 2;
    std::vector<float> src(scratch);
    for (uint64_t hd = 0; hd < t.permute_heads; ++hd) {
      for (uint64_t i = 0; i < half; ++i) {
        for (uint64_t j = 0; j < 2; ++j) {
          const uint64_t from = hd * per_head + j * half + i;
          const uint64_t to = hd * per_head + i * 2 + j;
          std::memcpy(&scratch[to * cols], &src[from * cols], cols * sizeof(float));
        }
      }
    }
  }
  MINFER_TRY(const uint64_t nbytes, gguf::tensor_nbytes(t.type, t.dims));
  out.resize(nbytes);
  return quant::quantize(t.type, scratch, out);
}

}  // namespace minfer::convert
