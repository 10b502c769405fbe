// Stage 3b (convert): config.json and the weight files of a Hugging Face checkpoint.
// Follows convert_hf_to_gguf.py (ModelBase.index_tensors, TextModel.set_gguf_parameters)
// for which files are read and in which order; hyperparameters missing from config.json
// take the defaults of the transformers config class where llama.cpp's converter gets
// them from (it loads config.json through transformers.AutoConfig).
#include "convert/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace minfer::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Result<uint32_t> get_u32(const json& c, const char* key) {
  if (!c.contains(key)) return make_error(fmt::format("config.json: missing \"{}\"", key));
  const json& v = c[key];
  if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > UINT32_MAX) {
    return make_error(fmt::format("config.json: \"{}\" is {}, expected an integer in 1..{}", key,
                                  v.dump(), UINT32_MAX));
  }
  return static_cast<uint32_t>(v.get<uint64_t>());
}

Result<double> get_f64(const json& c, const char* key, std::optional<double> fallback) {
  if (!c.contains(key) || c[key].is_null()) {
    if (fallback) return *fallback;
    return make_error(fmt::format("config.json: missing \"{}\"", key));
  }
  if (!c[key].is_number()) {
    return make_error(
        fmt::format("config.json: \"{}\" is {}, expected a number", key, c[key].dump()));
  }
  return c[key].get<double>();
}

// RoPE scaling adds keys (linear, YaRN) or a rope_freqs tensor (Llama 3.1) that this
// converter does not write; refuse rather than write a model that runs unscaled.
Status check_rope_scaling(const json& c) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json& r = c[key];
    std::string type = "?";
    if (r.is_object()) {
      const json& t = r.contains("rope_type") ? r["rope_type"]
                      : r.contains("type")    ? r["type"]
                                              : json("default");
      type = t.is_string() ? t.get<std::string>() : t.dump();
    }
    if (type != "default") {
      return make_error(fmt::format(
          "config.json: {} of type \"{}\" is not supported by minfer convert", key, type));
    }
  }
  return Ok{};
}

Result<std::vector<std::string>> part_names(const fs::path& dir,
                                            std::set<std::string>* index_names) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::vector<std::string> parts;
  if (fs::is_regular_file(index)) {
    MINFER_TRY(json idx, read_json_file(index.string()));
    if (!idx.contains("weight_map") || !idx["weight_map"].is_object()) {
      return make_error(index.string() + ": no \"weight_map\" object");
    }
    std::set<std::string> files;
    for (const auto& [name, file] : idx["weight_map"].items()) {
      if (!file.is_string()) {
        return make_error(
            fmt::format("{}: weight_map[\"{}\"] is not a file name", index.string(), name));
      }
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == "..") {
        return make_error(
            fmt::format("{}: part \"{}\" is not a file in the folder", index.string(), f));
      }
      files.insert(f);
      index_names->insert(name);
    }
    parts.assign(files.begin(), files.end());  // sorted, as the converter sorts them
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with("model") && n.ends_with(".safetensors")) parts.push_back(n);
    }
    if (ec) return make_error(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));
    std::sort(parts.begin(), parts.end());
  }
  if (parts.empty()) {
    return make_error(fmt::format(
        "no model*.safetensors in '{}' (only safetensors weights are supported)", dir.string()));
  }
  return parts;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The converter turns a sentence-transformers folder (modules.json with a pooling
// module) into an embedding model and a Qwen3 reranker (recognised by its README title
// or its name) into a classifier with extra tensors; for the decoder-only architectures
// this converter writes neither, so it refuses them rather than writing a plain language
// model from them. (BERT folders are embedding models: read_pooling.)
Status check_plain_language_model(const fs::path& dir, const json& config, const HParams& h) {
  if (h.arch == Arch::kBert) return Ok{};
  if (fs::is_regular_file(dir / "modules.json")) {
    return make_error(
        "modules.json: sentence-transformers embedding models are not supported by minfer "
        "convert");
  }
  if (h.arch != Arch::kQwen3) return Ok{};
  std::string hints = lower(dir.filename().string());
  if (config.contains("_name_or_path") && config["_name_or_path"].is_string()) {
    hints += " " + lower(config["_name_or_path"].get<std::string>());
  }
  std::string readme;
  if (fs::is_regular_file(dir / "README.md")) {
    auto r = read_file((dir / "README.md").string());
    if (r.ok()) readme = lower(*r);
  }
  if (hints.find("qwen3-reranker") != std::string::npos ||
      hints.find("qwen3-vl-reranker") != std::string::npos ||
      readme.find("# qwen3-reranker") != std::string::npos ||
      readme.find("# qwen3-vl-reranker") != std::string::npos) {
    return make_error("Qwen3 reranker checkpoints are not supported by minfer convert");
  }
  return Ok{};
}

// TextModel._try_set_pooling_type: the first modules.json entry whose type ends with
// "Pooling" names a folder whose config.json picks the mode (the first true flag of mean,
// cls, last token; else "pooling_mode"). Other modes (max, weighted mean) are refused,
// as there. No modules.json or no pooling module: no pooling_type key.
Result<std::optional<PoolingType>> read_pooling(const fs::path& dir) {
  const fs::path modules_path = dir / "modules.json";
  if (!fs::is_regular_file(modules_path)) return std::optional<PoolingType>();
  MINFER_TRY(const json modules, read_json_file(modules_path.string()));
  if (!modules.is_array()) return make_error("modules.json is not a JSON list");
  std::optional<std::string> pooling_dir;
  for (const json& m : modules) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
      return make_error("modules.json: an entry without a \"type\" string");
    }
    if (!m["type"].get<std::string>().ends_with("Pooling")) continue;
    if (!m.contains("path") || !m["path"].is_string()) {
      return make_error("modules.json: the pooling module has no \"path\" string");
    }
    pooling_dir = m["path"].get<std::string>();
    break;
  }
  if (!pooling_dir) return std::optional<PoolingType>();
  const fs::path cfg_path = dir / *pooling_dir / "config.json";
  if (!fs::is_regular_file(cfg_path)) {
    return make_error(fmt::format(
        "modules.json names pooling folder '{}', which has no config.json", *pooling_dir));
  }
  MINFER_TRY(const json p, read_json_file(cfg_path.string()));
  if (!p.is_object()) return make_error(cfg_path.string() + " is not a JSON object");
  auto flag = [&](const char* key) {
    return p.contains(key) && p[key].is_boolean() && p[key].get<bool>();
  };
  if (flag("pooling_mode_mean_tokens")) return std::optional(PoolingType::kMean);
  if (flag("pooling_mode_cls_token")) return std::optional(PoolingType::kCls);
  if (flag("pooling_mode_lasttoken")) return std::optional(PoolingType::kLast);
  const std::string mode = p.contains("pooling_mode") && p["pooling_mode"].is_string()
                               ? p["pooling_mode"].get<std::string>()
                               : "";
  if (mode == "mean") return std::optional(PoolingType::kMean);
  if (mode == "cls") return std::optional(PoolingType::kCls);
  if (mode == "lasttoken") return std::optional(PoolingType::kLast);
  return make_error(
      fmt::format("{}: only mean, CLS and last-token pooling are supported (the converter's set)",
                  cfg_path.string()));
}

// BertConfig's keys (transformers' defaults for the optional ones) and what the converter
// would add that this one does not write: classifier labels and classifier pooling.
Status read_bert_hparams(const json& c, HParams& h) {
  h.n_ctx = 512;
  if (c.contains("max_position_embeddings")) {
    MINFER_TRY(h.n_ctx, get_u32(c, "max_position_embeddings"));
  }
  h.n_token_types = 2;
  if (c.contains("type_vocab_size")) {
    MINFER_TRY(h.n_token_types, get_u32(c, "type_vocab_size"));
  }
  MINFER_TRY(h.norm_eps, get_f64(c, "layer_norm_eps", 1e-12));
  // The converter reads config.json through AutoConfig, which fills id2label from
  // num_labels (default 2: LABEL_0, LABEL_1) when absent; two labels whose first is
  // LABEL_0 are that placeholder and are not written.
  std::map<int64_t, std::string> labels;
  if (c.contains("id2label") && !c["id2label"].is_null()) {
    if (!c["id2label"].is_object()) return make_error("config.json: \"id2label\" is not an object");
    for (const auto& [k, v] : c["id2label"].items()) {
      int64_t id = 0;
      auto [q, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
      if (ec != std::errc() || q != k.data() + k.size() || !v.is_string()) {
        return make_error(fmt::format(
            "config.json: \"id2label\" entry '{}' is not an integer id with a string label", k));
      }
      labels[id] = v.get<std::string>();
    }
  } else {
    uint32_t n = 2;
    if (c.contains("num_labels")) {
      MINFER_TRY(n, get_u32(c, "num_labels"));
    }
    for (uint32_t i = 0; i < n; ++i) labels[i] = fmt::format("LABEL_{}", i);
  }
  const bool placeholder = labels.size() == 2 && labels.contains(0) && labels[0] == "LABEL_0";
  if (!placeholder) {
    for (const auto& [id, label] : labels) h.cls_labels.push_back(label);
  }
  if (c.contains("classifier_pooling") && !c["classifier_pooling"].is_null()) {
    return make_error("config.json: \"classifier_pooling\" is not supported by minfer convert");
  }
  if (h.n_embd % h.n_head != 0) {
    return make_error(
        fmt::format("config.json: hidden_size {} is not a multiple of num_attention_heads {}",
                    h.n_embd, h.n_head));
  }
  h.n_head_kv = h.n_head;
  h.n_embd_head = h.n_embd / h.n_head;
  return Ok{};
}

}  // namespace

Result<json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("cannot open '{}'", path));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    return make_error(fmt::format("{}: {}", path, e.what()));
  }
}

Result<HParams> read_hparams(const json& c) {
  if (!c.is_object()) return make_error("config.json is not a JSON object");
  if (!c.contains("architectures") || !c["architectures"].is_array() ||
      c["architectures"].empty() || !c["architectures"][0].is_string()) {
    return make_error("config.json: no \"architectures\" list");
  }
  HParams h;
  h.hf_arch = c["architectures"][0].get<std::string>();
  if (h.hf_arch == "LlamaForCausalLM") {
    h.arch = Arch::kLlama;
    h.gguf_arch = "llama";
  } else if (h.hf_arch == "Qwen2ForCausalLM") {
    h.arch = Arch::kQwen2;
    h.gguf_arch = "qwen2";
  } else if (h.hf_arch == "Qwen3ForCausalLM") {
    h.arch = Arch::kQwen3;
    h.gguf_arch = "qwen3";
  } else if (h.hf_arch == "BertModel" || h.hf_arch == "BertForSequenceClassification") {
    h.arch = Arch::kBert;
    h.gguf_arch = "bert";
  } else {
    return make_error(fmt::format(
        "architecture \"{}\" is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM, "
        "Qwen3ForCausalLM, BertModel, BertForSequenceClassification)",
        h.hf_arch));
  }
  if (h.arch == Arch::kBert) {
    MINFER_TRY(h.n_layer, get_u32(c, "num_hidden_layers"));
    MINFER_TRY(h.n_embd, get_u32(c, "hidden_size"));
    MINFER_TRY(h.n_ff, get_u32(c, "intermediate_size"));
    MINFER_TRY(h.n_head, get_u32(c, "num_attention_heads"));
    MINFER_TRY(h.n_vocab, get_u32(c, "vocab_size"));
    MINFER_TRY_STATUS(read_bert_hparams(c, h));
    return h;
  }
  MINFER_TRY(h.n_layer, get_u32(c, "num_hidden_layers"));
  MINFER_TRY(h.n_ctx, get_u32(c, "max_position_embeddings"));
  MINFER_TRY(h.n_embd, get_u32(c, "hidden_size"));
  MINFER_TRY(h.n_ff, get_u32(c, "intermediate_size"));
  MINFER_TRY(h.n_head, get_u32(c, "num_attention_heads"));
  MINFER_TRY(h.n_vocab, get_u32(c, "vocab_size"));
  // transformers' LlamaConfig makes a missing num_key_value_heads equal to the heads.
  h.n_head_kv = h.n_head;
  if (c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()) {
    MINFER_TRY(h.n_head_kv, get_u32(c, "num_key_value_heads"));
  }
  if (h.n_head % h.n_head_kv != 0) {
    return make_error(
        fmt::format("config.json: num_attention_heads {} is not a multiple of "
                    "num_key_value_heads {}",
                    h.n_head, h.n_head_kv));
  }
  if (c.contains("head_dim") && !c["head_dim"].is_null()) {
    MINFER_TRY(const uint32_t hd, get_u32(c, "head_dim"));
    h.head_dim = hd;
  } else if (h.arch == Arch::kLlama) {
    h.head_dim = h.n_embd / h.n_head;  // LlamaConfig always has head_dim
  } else if (h.arch == Arch::kQwen3) {
    h.head_dim = 128;  // Qwen3Config's default
  }
  h.n_embd_head = h.head_dim ? *h.head_dim : h.n_embd / h.n_head;
  if (!h.head_dim && h.n_embd % h.n_head != 0) {
    return make_error(
        fmt::format("config.json: hidden_size {} is not a multiple of "
                    "num_attention_heads {}",
                    h.n_embd, h.n_head));
  }
  if (h.arch == Arch::kLlama && h.n_embd_head % 2 != 0) {
    return make_error(fmt::format("config.json: head size {} is odd", h.n_embd_head));
  }
  // transformers 5 writes the RoPE base inside rope_parameters; the converter reads it
  // from there when the top level has none.
  const json& rp = c.contains("rope_parameters") && c["rope_parameters"].is_object()
                       ? c["rope_parameters"]
                       : json::object();
  MINFER_TRY(h.rope_theta, get_f64(c.contains("rope_theta") || !rp.contains("rope_theta") ? c : rp,
                                   "rope_theta", 10000.0));
  MINFER_TRY(h.rms_eps, get_f64(c, "rms_norm_eps", 1e-6));
  MINFER_TRY_STATUS(check_rope_scaling(c));
  if (c.contains("tie_word_embeddings")) {
    if (!c["tie_word_embeddings"].is_boolean()) {
      return make_error("config.json: \"tie_word_embeddings\" is not true/false");
    }
    h.tied_embeddings = c["tie_word_embeddings"].get<bool>();
  }
  return h;
}

Result<Checkpoint> Checkpoint::open(const std::string& dir, bool keep_pooler) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(
        fmt::format("'{}' is not a directory (expected a Hugging Face checkpoint "
                    "folder)",
                    dir));
  }
  Checkpoint ck;
  ck.dir_ = dir;
  const fs::path config_path = fs::path(dir) / "config.json";
  if (!fs::is_regular_file(config_path)) {
    return make_error(fmt::format("no config.json in '{}'", dir));
  }
  MINFER_TRY(ck.config_, read_json_file(config_path.string()));
  MINFER_TRY(ck.hparams_, read_hparams(ck.config_));
  ck.hparams_.keep_pooler = keep_pooler && ck.hparams_.arch == Arch::kBert;

  MINFER_TRY_STATUS(check_plain_language_model(dir, ck.config_, ck.hparams_));
  if (ck.hparams_.arch == Arch::kBert) {
    MINFER_TRY(ck.hparams_.pooling, read_pooling(dir));
  }

  std::set<std::string> index_names;
  MINFER_TRY(const auto parts, part_names(dir, &index_names));
  std::set<std::string> seen;
  for (const std::string& p : parts) {
    MINFER_TRY(auto f, SafetensorsFile::open((fs::path(dir) / p).string()));
    for (const StTensor& t : f->tensors()) {
      if (!seen.insert(t.name).second) {
        return make_error(
            fmt::format("tensor '{}' appears in more than one shard ({} again)", t.name, p));
      }
      ck.tensors_.push_back(&t);
    }
    ck.parts_.push_back(std::move(f));
  }
  if (!index_names.empty() && index_names != seen) {
    for (const std::string& n : index_names) {
      if (!seen.contains(n)) {
        return make_error(
            fmt::format("model.safetensors.index.json lists tensor '{}' that no shard holds", n));
      }
    }
    for (const std::string& n : seen) {
      if (!index_names.contains(n)) {
        return make_error(
            fmt::format("tensor '{}' is in a shard but not in model.safetensors.index.json", n));
      }
    }
  }
  return ck;
}

const StTensor* Checkpoint::find(std::string_view name) const {
  for (const StTensor* t : tensors_) {
    if (t->name == name) return t;
  }
  return nullptr;
}

}  // namespace minfer::convert
