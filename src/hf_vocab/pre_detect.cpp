// Stage 3b (HF vocabulary): tokenizer.json pre-tokenizer → llama.cpp's tokenizer.ggml.pre name.
// convert_hf_to_gguf.py identifies a pre-tokenizer by hashing the ids of a fixed text
// (get_vocab_base_pre); that needs the tokenizer itself. We identify it from its
// definition instead: the sequence of steps with their regexes must equal a known
// model's exactly, otherwise the tool refuses and asks for --pre.
#include <fmt/core.h>

#include <string>
#include <vector>

#include "hf_vocab/hf_vocab.h"

namespace minfer::hf_vocab {
namespace {

using nlohmann::json;

// One pre-tokenizer step reduced to what changes the split.
std::string step_signature(const json& step) {
  const std::string type = step.value("type", "");
  if (type == "Split") {
    std::string pattern;
    if (step.contains("pattern")) {
      const json& p = step["pattern"];
      if (p.contains("Regex")) pattern = "re:" + p["Regex"].get<std::string>();
      if (p.contains("String")) pattern = "str:" + p["String"].get<std::string>();
    }
    return fmt::format("Split({}, {}, invert={})", pattern, step.value("behavior", ""),
                       step.value("invert", false));
  }
  if (type == "ByteLevel") {
    return fmt::format("ByteLevel(prefix_space={}, use_regex={})",
                       step.value("add_prefix_space", false), step.value("use_regex", true));
  }
  if (type == "Digits") {
    return fmt::format("Digits(individual={})", step.value("individual_digits", false));
  }
  return type + "(" + step.dump() + ")";
}

// Llama 3 (tiktoken cl100k-style): numbers in runs of up to three digits.
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2 / Qwen2.5 / Qwen3: the same, but every digit on its own.
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct KnownPre {
  const char* name;
  std::vector<std::string> steps;
};

const std::vector<KnownPre>& known_pres() {
  static const std::vector<KnownPre> kKnown = {
      {"llama-bpe",
       {fmt::format("Split(re:{}, Isolated, invert=false)", kLlama3Regex),
        "ByteLevel(prefix_space=false, use_regex=false)"}},
      {"qwen2",
       {fmt::format("Split(re:{}, Isolated, invert=false)", kQwen2Regex),
        "ByteLevel(prefix_space=false, use_regex=false)"}},
      // GPT-2: ByteLevel with its built-in regex.
      {"gpt-2", {"ByteLevel(prefix_space=false, use_regex=true)"}},
      // SmolLM / StarCoder: single digits first, then the GPT-2 regex (llama.cpp gives
      // "smollm" and "starcoder" the same split).
      {"smollm", {"Digits(individual=true)", "ByteLevel(prefix_space=false, use_regex=true)"}},
  };
  return kKnown;
}

}  // namespace

Result<std::string> detect_pre(const json& pre_tokenizer) {
  if (pre_tokenizer.is_null()) {
    return make_error("tokenizer.json has no pre_tokenizer; pass --pre NAME");
  }
  std::vector<std::string> steps;
  if (pre_tokenizer.value("type", "") == "Sequence") {
    for (const json& s : pre_tokenizer.value("pretokenizers", json::array())) {
      steps.push_back(step_signature(s));
    }
  } else {
    steps.push_back(step_signature(pre_tokenizer));
  }
  for (const KnownPre& k : known_pres()) {
    if (k.steps == steps) return std::string(k.name);
  }
  std::string found;
  for (const std::string& s : steps) found += "\n  " + s;
  return make_error(fmt::format(
      "unknown pre-tokenizer; pass --pre NAME (a name llama.cpp knows). Steps:{}", found));
}

}  // namespace minfer::hf_vocab
