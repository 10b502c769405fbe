// Stage 3b (convert): a Hugging Face checkpoint folder → one GGUF file, byte for byte
// what llama.cpp's convert_hf_to_gguf.py writes for the supported architectures
// (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, BertModel,
// BertForSequenceClassification) and out types.
// Invariants: everything is validated (config, every tensor's dtype, shape and bytes,
// the tokenizer) before the output is opened; the output is written to OUT.tmp and
// renamed over OUT only when complete, so a failure never leaves a partial OUT.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "convert/tensors.h"
#include "core/result.h"

namespace minfer::convert {

// "f32", "f16", "bf16", "q8_0", "auto".
Result<OutType> parse_outtype(std::string_view s);
std::string_view outtype_name(OutType t);

struct ConvertOptions {
  std::string hf_dir;
  std::string out_path;
  OutType outtype = OutType::kAuto;
  // BERT: write bert.pooler.dense as cls.weight/cls.bias (not byte-identical to
  // llama.cpp's converter, which drops the pooler; a BertForSequenceClassification's
  // scores need it to equal transformers').
  bool keep_pooler = false;
  // Called once per tensor, after it is written (index from 1, count, the tensor).
  std::function<void(size_t, size_t, const PlannedTensor&)> on_tensor;
};

struct ConvertSummary {
  OutType outtype = OutType::kF16;  // resolved
  size_t n_tensors = 0;
  uint64_t n_bytes = 0;  // the output file's size
};

Result<ConvertSummary> convert_checkpoint(const ConvertOptions& opts);

}  // namespace minfer::convert
