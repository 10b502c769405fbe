// Test helper (tokenizer differential test): encodes many strings in one process.
// `tokenize_batch VOCAB.gguf STRINGS.jsonl` reads one JSON string per line and prints
// one JSON object per line: {"ids": [...], "dec": "<decode(ids)>"} — ids encoded with
// no BOS/EOS and no special-token parsing (llama.cpp's vocab-test settings); "dec" is
// the decoded text with invalid UTF-8 replaced by U+FFFD so a bad decode still prints.
// An encode error prints {"error": "..."} for that line; the exit status is then 1.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf STRINGS.jsonl\n", argv[0]);
    return 2;
  }
  auto model = minfer::gguf::Model::open(argv[1]);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message.c_str());
    return 2;
  }
  auto tok = minfer::tokenizer::Tokenizer::from_gguf(*model);
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.error().message.c_str());
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", argv[2]);
    return 2;
  }
  const minfer::tokenizer::EncodeOptions opts{.add_special = false, .parse_special = false};
  int rc = 0;
  std::string line;
  std::string out;
  while (std::getline(in, line)) {
    const std::string text = nlohmann::json::parse(line).get<std::string>();
    auto ids = (*tok)->encode(text, opts);
    nlohmann::json j;
    if (!ids) {
      j["error"] = ids.error().message;
      rc = 1;
    } else {
      j["ids"] = *ids;
      j["dec"] = (*tok)->decode(*ids);
    }
    out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return rc;
}
