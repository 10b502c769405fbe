// Stage 3b (HF vocabulary): a Hugging Face tokenizer.json (+ tokenizer_config.json)
// turned into the vocabulary metadata llama.cpp's convert_hf_to_gguf.py writes
// (tokenizer.ggml.*); used by `minfer convert` and the minfer-hf-vocab fixture tool.
// Invariants: token i of the output is the token with id i in tokenizer.json (holes are
// "[PAD{i}]", UNUSED); the tokenizer model and pre-tokenizer are detected or refused,
// never guessed; every deviation from the converter is named where it is made.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "gguf/gguf.h"
#include "gguf/token_type.h"

namespace minfer::hf_vocab {

// llama.cpp's LLAMA_TOKEN_TYPE_* / gguf.TokenType.
using TokenType = gguf::TokenType;

struct Options {
  std::string arch = "llama";  // general.architecture
  std::string name;            // general.name ("" → not written)
  std::string pre;             // tokenizer.ggml.pre ("" → detect, error if unknown)
  uint32_t vocab_size = 0;     // pad the token list to this many ids (0 → max id + 1)
};

// The special-token ids and flags SpecialVocab collects (gguf-py/gguf/vocab.py).
struct SpecialTokens {
  std::optional<int32_t> bos, eos, unk, sep, pad, cls, mask;
  std::optional<bool> add_bos, add_eos, add_sep;
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;             // "llama" only
  std::vector<std::string> merges;       // "gpt2" only, "a b" form
  std::optional<bool> add_space_prefix;  // "llama" only
  SpecialTokens special;
  std::string chat_template;  // "" → none
  // Named extra templates (tokenizer_config chat_template as a list of {name, template}).
  std::vector<std::pair<std::string, std::string>> named_templates;
};

// `config` may be null (no tokenizer_config.json).
Result<Vocab> build_vocab(const nlohmann::json& tokenizer, const nlohmann::json* config,
                          const Options& opts);

// convert_hf_to_gguf.py does_token_look_special: added tokens some models forget to
// mark special but that must be control tokens ("<|x|>", "<pad>", "<unused3>", ...).
bool looks_special(const std::string& token);

// tokenizer.ggml.pre for a byte-level BPE pre-tokenizer (tokenizer.json "pre_tokenizer"),
// or an error that quotes what was found.
Result<std::string> detect_pre(const nlohmann::json& pre_tokenizer);

// The metadata in the converter's order: general.*, then tokenizer.ggml.*, then the
// chat template(s).
gguf::Writer to_writer(const Vocab& vocab, const Options& opts);

}  // namespace minfer::hf_vocab
