// Stage 3b (convert): model metadata. Follows convert_hf_to_gguf.py (ModelBase /
// TextModel.prepare_metadata and set_gguf_parameters, LlamaModel.set_gguf_parameters) and
// gguf-py (metadata.py, utility.py). Not followed: the model card (README.md),
// generation_config.json and config.json's _name_or_path, and the split of a folder name
// into basename / finetune / version / size parts — general.name is the title-cased
// folder name and general.size_label the parameter count; for folder names such as
// "Qwen2.5-7B-Instruct" or checkpoints with those files llama.cpp's converter writes more
// general.* keys than we do (docs/USAGE.md says so).
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

  set("general.architecture", Value::string(a));
  set("general.type", Value::string("model"));
  set("general.name", Value::string(id_to_title(dir.filename().string())));
  if (n_params > 0) set("general.size_label", Value::string(size_label(n_params)));
  set(a + ".block_count", Value::u32(h.n_layer));
  set(a + ".context_length", Value::u32(h.n_ctx));
  set(a + ".embedding_length", Value::u32(h.n_embd));
  set(a + ".feed_forward_length", Value::u32(h.n_ff));
  set(a + ".attention.head_count", Value::u32(h.n_head));
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
