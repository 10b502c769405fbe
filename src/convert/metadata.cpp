// Stage 3b (convert): model metadata. Follows convert_hf_to_gguf.py (ModelBase /
// TextModel.prepare_metadata and set_gguf_parameters, LlamaModel.set_gguf_parameters,
// BertModel.set_gguf_parameters) and
// gguf-py (metadata.py: generation_config.json's sampling keys, the naming heuristics of
// model_name.cpp; utility.py: the size label). Not followed: the model card (README.md
// front matter: license, tags, languages, base models, ...), which llama.cpp's converter
// also turns into general.* keys (docs/USAGE.md says so).
#include "convert/metadata.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

namespace minfer::convert {
namespace {

using gguf::Value;

bool is_lower_word(const std::string& w) {  // Python str.islower() for ASCII
  bool cased = false;
  for (unsigned char c : w) {
    if (std::isupper(c)) return false;
    if (std::islower(c)) cased = true;
  }
  return cased;
}

std::string title(const std::string& w) {  // Python str.title() for ASCII
  std::string out = w;
  bool prev_cased = false;
  for (char& ch : out) {
    const unsigned char c = static_cast<unsigned char>(ch);
    const bool cased = std::isalpha(c) != 0;
    if (cased) ch = static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c));
    prev_cased = cased;
  }
  return out;
}

// generation_config.json → general.sampling.* (Metadata.load; an unreadable file is
// skipped, as there). Integers are i32, the rest f32, the sequence a string.
void add_sampling(const std::filesystem::path& path, std::vector<gguf::KeyValue>& kv) {
  if (!std::filesystem::is_regular_file(path)) return;
  auto gen = read_json_file(path.string());
  if (!gen.ok() || !gen->is_object()) return;
  const nlohmann::json& g = *gen;
  auto num = [&](const char* key) -> const nlohmann::json* {
    return g.contains(key) && g[key].is_number() ? &g[key] : nullptr;
  };
  if (g.contains("sequence") && g["sequence"].is_string()) {
    kv.push_back({"general.sampling.sequence", Value::string(g["sequence"].get<std::string>())});
  }
  auto i32 = [&](const char* key, const char* name) {
    if (const auto* v = num(key)) kv.push_back({name, Value::i32(v->get<int32_t>())});
  };
  auto f32 = [&](const nlohmann::json* v, const char* name) {
    if (v) kv.push_back({name, Value::f32(v->get<float>())});
  };
  i32("top_k", "general.sampling.top_k");
  f32(num("top_p"), "general.sampling.top_p");
  f32(num("min_p"), "general.sampling.min_p");
  f32(num("xtc_probability"), "general.sampling.xtc_probability");
  f32(num("xtc_threshold"), "general.sampling.xtc_threshold");
  f32(num("temperature"), "general.sampling.temp");
  i32("penalty_last_n", "general.sampling.penalty_last_n");
  f32(num("penalty_repeat") ? num("penalty_repeat") : num("repetition_penalty"),
      "general.sampling.penalty_repeat");
  i32("mirostat", "general.sampling.mirostat");
  f32(num("mirostat_tau"), "general.sampling.mirostat_tau");
  f32(num("mirostat_eta"), "general.sampling.mirostat_eta");
}

}  // namespace

uint32_t file_type(OutType ot) {
  switch (ot) {
    case OutType::kF32:
      return 0;
    case OutType::kBF16:
      return 32;
    case OutType::kQ8_0:
      return 7;
    case OutType::kF16:
    case OutType::kAuto:
      break;
  }
  return 1;
}

std::string size_label(uint64_t n) {
  const double x = static_cast<double>(n);
  double scaled = 0;
  char suffix = 'K';
  if (x > 1e12) {
    scaled = x * 1e-12, suffix = 'T';
  } else if (x > 1e9) {
    scaled = x * 1e-9, suffix = 'B';
  } else if (x > 1e6) {
    scaled = x * 1e-6, suffix = 'M';
  } else {
    scaled = x * 1e-3;
  }
  // Decimals: enough for two significant digits of the rounded value. std::nearbyint
  // rounds half to even, as Python's round() does; printf rounds like Python's format.
  std::string digits = std::to_string(static_cast<long long>(std::nearbyint(scaled)));
  digits.erase(0, digits.find_first_not_of('0') == std::string::npos
                      ? digits.size()
                      : digits.find_first_not_of('0'));
  const int fix = std::max(2 - static_cast<int>(digits.size()), 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%c", fix, scaled, suffix);
  return buf;
}

std::string id_to_title(const std::string& id) {
  static const std::regex kVersionOrNumber(R"(^(v\d+(?:\.\d+)*|\d.*)$)");
  std::string s = id;
  for (char& c : s) {
    if (c == '-') c = ' ';
  }
  std::istringstream in(s);
  std::string w, out;
  while (in >> w) {
    if (!out.empty()) out += ' ';
    out += is_lower_word(w) && !std::regex_match(w, kVersionOrNumber) ? title(w) : w;
  }
  return out;
}

Result<std::vector<gguf::KeyValue>> build_metadata(const Checkpoint& ck, OutType outtype,
                                                   const std::vector<PlannedTensor>& tensors) {
  const HParams& h = ck.hparams();
  const std::string& a = h.gguf_arch;
  std::vector<gguf::KeyValue> kv;
  auto set = [&](std::string key, Value v) { kv.push_back({std::move(key), std::move(v)}); };

  uint64_t n_params = 0;
  for (const PlannedTensor& t : tensors) n_params += t.src->n_elements;
  std::filesystem::path dir(ck.dir());
  if (!dir.has_filename()) dir = dir.parent_path();  // "folder/" names "folder"
  const GeneralInfo g =
      general_info(dir.filename().string(), ck.config(), static_cast<int64_t>(n_params));

  set("general.architecture", Value::string(a));
  set("general.type", Value::string("model"));
  add_sampling(dir / "generation_config.json", kv);
  const std::pair<const char*, const std::optional<std::string>*> names[] = {
      {"general.name", &g.name},
      {"general.version", &g.version},
      {"general.organization", &g.organization},
      {"general.finetune", &g.finetune},
      {"general.basename", &g.basename},
      {"general.size_label", &g.size_label},
  };
  for (const auto& [key, value] : names) {
    if (value->has_value()) set(key, Value::string(**value));
  }
  set(a + ".block_count", Value::u32(h.n_layer));
  set(a + ".context_length", Value::u32(h.n_ctx));
  set(a + ".embedding_length", Value::u32(h.n_embd));
  set(a + ".feed_forward_length", Value::u32(h.n_ff));
  set(a + ".attention.head_count", Value::u32(h.n_head));
  if (h.arch == Arch::kBert) {
    // TextModel.set_gguf_parameters finds no KV heads, RoPE or RMS epsilon in a
    // BertConfig, only layer_norm_eps; BertModel adds non-causal attention and the
    // sentence-transformers pooling.
    set(a + ".attention.layer_norm_epsilon", Value::f32(static_cast<float>(h.norm_eps)));
    set("general.file_type", Value::u32(file_type(outtype)));
    set(a + ".attention.causal", Value::boolean(false));
    if (h.pooling) set(a + ".pooling_type", Value::u32(static_cast<uint32_t>(*h.pooling)));
    if (!h.cls_labels.empty())
      set(a + ".classifier.output_labels", Value::string_array(h.cls_labels));
    set("general.quantization_version", Value::u32(2));  // GGML_QNT_VERSION
    MINFER_TRY_STATUS(add_vocab_metadata(ck, kv));
    return kv;
  }
  set(a + ".attention.head_count_kv", Value::u32(h.n_head_kv));
  set(a + ".rope.freq_base", Value::f32(static_cast<float>(h.rope_theta)));
  set(a + ".attention.layer_norm_rms_epsilon", Value::f32(static_cast<float>(h.rms_eps)));
  if (h.head_dim) {
    set(a + ".attention.key_length", Value::u32(*h.head_dim));
    set(a + ".attention.value_length", Value::u32(*h.head_dim));
  }
  set("general.file_type", Value::u32(file_type(outtype)));
  if (h.arch == Arch::kLlama) {
    set(a + ".vocab_size", Value::u32(h.n_vocab));
    set(a + ".rope.dimension_count", Value::u32(h.n_embd_head));
  }
  set("general.quantization_version", Value::u32(2));  // GGML_QNT_VERSION
  MINFER_TRY_STATUS(add_vocab_metadata(ck, kv));
  return kv;
}

}  // namespace minfer::convert
