// Stage 3b (convert): a Hugging Face checkpoint folder — config.json, the safetensors
// weights (one file, or shards listed by model.safetensors.index.json) and the
// architecture's hyperparameters read from config.json.
// Invariants: tensors() lists every tensor once, in the order llama.cpp's
// convert_hf_to_gguf.py visits them (shard files sorted by name, tensors sorted by name
// within a shard); a name in two shards, or an index that disagrees with the shards, is
// an error; the views stay valid while the Checkpoint lives.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "convert/safetensors.h"
#include "core/result.h"

namespace minfer::convert {

// The architectures `minfer convert` knows, by config.json "architectures"[0].
enum class Arch { kLlama, kQwen2, kQwen3, kBert };

// gguf-py's PoolingType, written as {arch}.pooling_type (a sentence-transformers folder).
enum class PoolingType : uint32_t { kMean = 1, kCls = 2, kLast = 3 };

struct HParams {
  Arch arch = Arch::kLlama;
  std::string hf_arch;    // "LlamaForCausalLM"
  std::string gguf_arch;  // general.architecture: "llama", "qwen2", "qwen3"
  uint32_t n_layer = 0;
  uint32_t n_ctx = 0;  // max_position_embeddings
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t n_vocab = 0;
  uint32_t n_embd_head = 0;          // the head size the weights are shaped by
  std::optional<uint32_t> head_dim;  // written as key_length / value_length when set
  double rope_theta = 0;
  double rms_eps = 0;
  bool tied_embeddings = false;
  // BERT: LayerNorm epsilon (layer_norm_eps), rows of token_types (type_vocab_size) and
  // the pooling of a sentence-transformers folder (modules.json), if any.
  double norm_eps = 0;
  uint32_t n_token_types = 0;
  std::optional<PoolingType> pooling;
  // BERT classifier labels (config.json id2label in id order), written as
  // {arch}.classifier.output_labels; empty for transformers' placeholder pair
  // LABEL_0/LABEL_1, which the converter treats as "no labels". With labels a
  // BertForSequenceClassification "classifier" becomes cls.output (the score projection).
  std::vector<std::string> cls_labels;
  // Keep bert.pooler.dense as cls.weight/cls.bias (llama.cpp's converter drops it, so its
  // files score without the pooler's dense + tanh and differ from transformers').
  bool keep_pooler = false;
};

// config.json → HParams. Errors name the missing or bad key, or the unknown architecture.
// (pooling is read by Checkpoint::open, from the folder.)
Result<HParams> read_hparams(const nlohmann::json& config);

class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& dir, bool keep_pooler = false);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  const HParams& hparams() const { return hparams_; }
  const std::vector<const StTensor*>& tensors() const { return tensors_; }
  const StTensor* find(std::string_view name) const;

 private:
  std::string dir_;
  nlohmann::json config_;
  HParams hparams_;
  std::vector<std::unique_ptr<SafetensorsFile>> parts_;
  std::vector<const StTensor*> tensors_;
};

// Reads a JSON file; errors name the path.
Result<nlohmann::json> read_json_file(const std::string& path);

}  // namespace minfer::convert
