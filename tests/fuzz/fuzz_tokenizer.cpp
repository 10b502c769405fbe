// Fuzz target (stage 4): Tokenizer::encode on arbitrary bytes, over llama.cpp's vocab
// GGUFs (tests/data/vocab), with and without special-token parsing.
// Invariants under test: encode never crashes, hangs or reads out of bounds, whatever
// the bytes (invalid UTF-8 included); every id it returns is in the vocabulary; ids
// decode back to bytes; on the byte-level BPE vocabularies, valid UTF-8 text without
// special tokens decodes back to itself (every byte has a token).
// Input: byte 0 picks the vocabulary (low 3 bits, modulo their number; bert-bge is
// WordPiece) and the options (bit 3: parse_special, bit 4: add_special); the rest is
// the text.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

using minfer::tokenizer::EncodeOptions;
using minfer::tokenizer::Tokenizer;

struct Vocab {
  const char* name;
  bool byte_level;  // byte-level BPE: decode(encode(text)) == text
  std::unique_ptr<Tokenizer> tok;
};

std::vector<Vocab>& vocabs() {
  static std::vector<Vocab> v = [] {
    std::vector<Vocab> out;
    for (auto [name, byte_level] : {std::pair{"gpt-2", true},
                                    {"llama-spm", false},
                                    {"phi-3", false},
                                    {"deepseek-coder", true},
                                    {"qwen2", true},
                                    {"llama-bpe", true},
                                    {"bert-bge", false}}) {
      const std::string path =
          std::string(MINFER_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
      auto model = minfer::gguf::Model::open(path);
      MINFER_CHECK(model.ok(), "fuzz_tokenizer: cannot open %s", path.c_str());
      auto tok = Tokenizer::from_gguf(*model);
      MINFER_CHECK(tok.ok(), "fuzz_tokenizer: %s: %s", name, tok.error().message.c_str());
      out.push_back({name, byte_level, std::move(tok).value()});
    }
    return out;
  }();
  return v;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocabs();  // load once, outside the timed inputs
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Vocab& v = vocabs()[(data[0] & 7) % vocabs().size()];
  EncodeOptions opts{.add_special = (data[0] & 16) != 0, .parse_special = (data[0] & 8) != 0};
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto ids = v.tok->encode(text, opts);
  if (!ids.ok()) return 0;  // an error is an answer; a crash is not
  for (auto id : *ids)
    MINFER_CHECK(id >= 0 && id < v.tok->n_vocab(), "%s: id %d outside [0, %d)", v.name, id,
                 v.tok->n_vocab());
  const std::string back = v.tok->decode(*ids, /*special=*/true);
  if (v.byte_level && !opts.parse_special && !opts.add_special && valid_utf8(text)) {
    MINFER_CHECK(back == text, "%s: decode(encode(text)) differs: %zu bytes in, %zu out", v.name,
                 text.size(), back.size());
  }
  return 0;
}
