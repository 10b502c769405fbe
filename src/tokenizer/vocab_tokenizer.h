// Stage 4 (text → ids): the one concrete Tokenizer — llama.cpp's SPM, BPE and WPM
// vocab types over a shared vocabulary (internal header; users see tokenizer.h).
// Invariants: token_to_id_ and tokens_ are inverse (token texts are unique), the map's
// keys view the texts in tokens_, which never change after load; attrs_,
// scores_ and types_ have one entry per token; special_cache_ holds every control,
// user-defined and unknown token, longest text first.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace minfer::tokenizer {

enum class VocabType { kSpm, kBpe, kWpm };

// Lets the maps be searched with a string_view, without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// One piece of the input after the special-token partition: either a token or a
// byte range of the input still to be tokenized.
struct Fragment {
  TokenId token = kNoToken;  // kNoToken → raw text
  size_t offset = 0;
  size_t length = 0;
};

class VocabTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> build(VocabData data);
  // token_to_id_ views tokens_: a copy would view the original's texts.
  VocabTokenizer(const VocabTokenizer&) = delete;
  VocabTokenizer& operator=(const VocabTokenizer&) = delete;

  Result<std::vector<TokenId>> encode(std::string_view text,
                                      const EncodeOptions& opts) const override;
  std::string token_to_bytes(TokenId id, bool special) const override;
  TokenId find_token(std::string_view text) const override;

  // Pieces of the special-token partition (special_partition.cpp).
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

 private:
  VocabTokenizer() = default;
  Status load(VocabData& data);                  // vocab_load.cpp
  void apply_name_rules(const VocabData& data);  // vocab_load.cpp
  void build_eog();                              // vocab_load.cpp

  // bpe.cpp: one raw-text fragment, words split by the pre-tokenizer.
  Status bpe_encode(std::string_view text, std::vector<TokenId>& out) const;
  void bpe_encode_word(const std::string& word, std::vector<TokenId>& out) const;
  int bpe_rank(std::string_view left, std::string_view right) const;
  // spm.cpp: one raw-text fragment, spaces already escaped as U+2581.
  void spm_encode(const std::string& text, std::vector<TokenId>& out) const;
  TokenId spm_byte_token(uint8_t byte) const;
  // wpm.cpp: one raw-text fragment — BertNormalizer, BertPreTokenizer, WordPiece.
  void wpm_encode(std::string_view text, std::vector<TokenId>& out) const;
  void wpm_encode_word(const std::string& word, size_t n_chars, std::vector<TokenId>& out) const;
  TokenId wpm_piece(std::string_view piece, bool word_start, std::string& key) const;

  VocabType type_ = VocabType::kSpm;
  // Keyed by views of tokens_ rather than copies: a 262k-token vocabulary then costs
  // ~48 bytes a node instead of ~64, and no second heap copy of its long texts.
  std::unordered_map<std::string_view, TokenId, StringHash> token_to_id_;
  // BPE merge ranks keyed "left right" (neither side of a lookup contains a space,
  // so the key is unambiguous; the first occurrence of a pair keeps its rank).
  StringMap<int> bpe_ranks_;
  std::optional<PreTokenizer> pre_tokenizer_;
  bool ignore_merges_ = false;
  std::vector<TokenId> special_cache_;
  // WordPiece: normalizer options, [SEP] closing without an add_eos flag, and the
  // longest token text in bytes (bounds the longest-match search).
  bool wpm_lowercase_ = true;
  bool wpm_strip_accents_ = true;
  bool wpm_close_with_sep_ = false;
  size_t wpm_max_token_len_ = 0;
};

}  // namespace minfer::tokenizer
