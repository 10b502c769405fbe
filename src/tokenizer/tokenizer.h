// Stage 4 (text → ids): vocabulary from GGUF metadata and the tokenizers llama.cpp
// runs: byte-level BPE (pre-tokenizer chosen by `tokenizer.ggml.pre`),
// SentencePiece-style (`tokenizer.ggml.model = llama`) with byte fallback, and
// WordPiece (`bert`, Hugging Face tokenizers' BertNormalizer + BertPreTokenizer).
// Invariants: ids equal llama.cpp's for the same GGUF and text (WordPiece: equal to
// Hugging Face tokenizers' where llama.cpp differs from it); special-token text
// is parsed as special only when asked; decoding yields the original bytes (not for
// WordPiece, whose normalizer lowercases, strips accents and drops whitespace).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "gguf/gguf.h"
#include "gguf/token_type.h"

namespace minfer::tokenizer {

using TokenId = int32_t;
constexpr TokenId kNoToken = -1;

// GGUF `tokenizer.ggml.token_type` values (llama.cpp's LLAMA_TOKEN_TYPE_*).
using TokenType = gguf::TokenType;

// llama.cpp's per-token attributes (LLAMA_TOKEN_ATTR_*): derived from the token type,
// then adjusted at load by llama.cpp's name-based rules (end-of-turn texts become
// control, Phi-3 special tokens strip spaces on their right, ...). They decide which
// tokens the special-token partition and the detokenizer treat as special.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

struct SpecialIds {
  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken;
  TokenId unk = kNoToken, pad = kNoToken, sep = kNoToken, mask = kNoToken;
  TokenId fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  TokenId fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  std::vector<TokenId> eog;  // every end-of-generation id (eos, eot, eom, and known ones)
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: prepend "▁" to the text
};

// Everything a tokenizer is built from. from_gguf fills it from `tokenizer.ggml.*`
// metadata; tools and tests may fill it directly. Unset optionals take llama.cpp's
// defaults for the model type.
struct VocabData {
  std::string model;                 // tokenizer.ggml.model: "gpt2", "llama" or "bert"
  std::string pre;                   // tokenizer.ggml.pre; "" → "default"
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores; empty → all 0
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type; empty → all normal
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("left right"), BPE only
  std::optional<TokenId> bos, eos, eot, eom, unk, pad, sep, mask;
  std::optional<TokenId> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::optional<bool> add_sep;  // tokenizer.ggml.add_sep_token (pairs; read, not used to encode)
  // WordPiece normalizer (tokenizer.ggml.normalizer.*): lowercase defaults to true,
  // strip_accents to lowercase (BertNormalizer's strip_accents: null).
  std::optional<bool> lowercase, strip_accents;
  std::string chat_template;  // tokenizer.chat_template
  std::string general_name;   // general.name: llama.cpp keys some token attributes on it
  std::string general_arch;   // general.architecture
};

struct EncodeOptions {
  bool add_special = true;     // BOS/EOS as the vocabulary asks
  bool parse_special = false;  // treat control-token text in the input as those tokens
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Reads tokenizer.ggml.* metadata. Unknown model or pre-tokenizer → error naming it.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::Model& model);
  // Same, from data already read (see VocabData).
  static Result<std::unique_ptr<Tokenizer>> from_vocab(VocabData data);

  virtual Result<std::vector<TokenId>> encode(std::string_view text,
                                              const EncodeOptions& opts) const = 0;
  // The raw bytes a token stands for (byte tokens → their byte; BPE byte-level
  // mapping undone; SentencePiece "▁" → space; WordPiece: a word's first piece with a
  // space before it, a "##" piece bare). Control tokens → their text only when
  // `special` is true, otherwise empty (WordPiece: with a space before it, a word
  // like the others, as tokenizers' WordPiece decoder writes it).
  virtual std::string token_to_bytes(TokenId id, bool special = false) const = 0;
  // Concatenated token_to_bytes. With add_space_prefix the first token's leading space
  // is dropped (the one encode added), as llama_detokenize does; WordPiece drops the
  // leading space of the first non-empty piece (tokenizers' WordPiece decoder puts
  // none before the first word); no other clean-up.
  std::string decode(const std::vector<TokenId>& ids, bool special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token_text(TokenId id) const { return tokens_.at(static_cast<size_t>(id)); }
  TokenType token_type(TokenId id) const { return types_.at(static_cast<size_t>(id)); }
  uint32_t token_attr(TokenId id) const {
    return attrs_.at(static_cast<size_t>(id));
  }  // TokenAttr bits
  // Id of a token by its exact text; kNoToken if absent.
  virtual TokenId find_token(std::string_view text) const = 0;
  const SpecialIds& special() const { return special_; }
  bool is_eog(TokenId id) const;
  const std::string& model_name() const { return model_; }  // "gpt2", "llama", "bert"
  const std::string& pre_name() const { return pre_; }
  const std::string& chat_template() const { return chat_template_; }  // "" if none

 protected:
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<uint32_t> attrs_;
  SpecialIds special_;
  std::string model_;
  std::string pre_;
  std::string chat_template_;
  bool drop_first_space_ = false;  // WordPiece: see decode
};

// Streaming detokenizer: feed ids, get back only complete UTF-8 sequences; bytes of
// a sequence split across tokens are held until it completes. `flush` returns the
// rest (possibly an incomplete sequence) at the end of a stream.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool special = false)
      : tok_(tok), special_(special) {}
  std::string push(TokenId id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace minfer::tokenizer
