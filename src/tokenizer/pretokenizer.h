// Stage 4 (text → ids): the byte-level BPE pre-tokenizer — text split into words by
// the regex list that `tokenizer.ggml.pre` names, run through PCRE2 (UTF + UCP, JIT).
// Invariants: the words concatenate back to the input (after llama.cpp's U+FFFD
// replacement of invalid bytes); every split equals llama.cpp's unicode_regex_split
// for the same regex list and text (see pretokenizer.cpp for how the two engines are
// made to agree).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace minfer::tokenizer {

// What a `tokenizer.ggml.pre` name selects, beyond its regexes.
struct PreTokenizerSpec {
  std::string name;                  // canonical name (the first alias)
  std::vector<std::string> regexes;  // applied in order, each inside the previous pieces
  bool ignore_merges = false;        // a word that is a whole vocabulary token skips merging
  bool default_add_bos = false;      // add_bos before metadata overrides it
  bool no_bos = false;               // the vocabulary has no BOS (chatglm)
};

// Looks a pre-tokenizer up by its GGUF name (aliases included). An empty name means
// "default", as in llama.cpp (which warns). Unknown → error naming it.
Result<PreTokenizerSpec> find_pre_tokenizer(std::string_view name);
// Every name find_pre_tokenizer accepts (for tests and `minfer info`).
std::vector<std::string> known_pre_tokenizers();

class PreTokenizer {
 public:
  // Compiles every regex; an error names the regex and PCRE2's message.
  static Result<PreTokenizer> create(const std::vector<std::string>& regexes);

  // Splits `text` into words (UTF-8, not yet byte-encoded).
  Result<std::vector<std::string>> split(std::string_view text) const;

  // The pattern handed to PCRE2 for one of llama.cpp's regexes (exposed for tests).
  static std::string translate(std::string_view regex);

 private:
  struct Compiled;
  std::vector<std::shared_ptr<const Compiled>> regexes_;
};

}  // namespace minfer::tokenizer
