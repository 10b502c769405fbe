// Stage 3b (convert): the GGUF metadata of a converted checkpoint, key for key and in
// the order llama.cpp's convert_hf_to_gguf.py writes it: general.* (architecture, type,
// name, size label), the architecture's hyperparameters, file type, quantization
// version, then the vocabulary (tokenizer.ggml.*) and chat template.
// Invariant: every value has the GGUF type the converter gives it (u32 counts, f32
// RoPE base and epsilon).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "convert/checkpoint.h"
#include "convert/tensors.h"
#include "gguf/gguf.h"

namespace minfer::convert {

// general.file_type for an out type (llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7,
// MOSTLY_BF16 32).
uint32_t file_type(OutType ot);

// "16M", "1.5B": gguf-py's rounded parameter count (utility.size_label).
std::string size_label(uint64_t n_params);

// gguf-py's Metadata.id_to_title: a folder name as a title ("qwen2" → "Qwen2").
std::string id_to_title(const std::string& id);

// The general.* naming keys (model_name.cpp); unset ones are not written.
struct GeneralInfo {
  std::optional<std::string> name, version, organization, finetune, basename, size_label;
};
GeneralInfo general_info(const std::string& dir_name, const nlohmann::json& config,
                         int64_t total_params);

Result<std::vector<gguf::KeyValue>> build_metadata(const Checkpoint& ck, OutType outtype,
                                                   const std::vector<PlannedTensor>& tensors);

// The tokenizer.* keys, appended to `kvs`.
Status add_vocab_metadata(const Checkpoint& ck, std::vector<gguf::KeyValue>& kvs);

}  // namespace minfer::convert
