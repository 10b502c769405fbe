// Stage 3b (convert): WordPiece vocabularies. Follows convert_hf_to_gguf.py
// (TextModel.get_vocab_base, get_vocab_base_pre; BertModel.set_vocab's phantom space) and
// Hugging Face tokenizers' WordPiece model (greedy longest match, "##" continuations,
// the whole word unknown when a piece is missing, max_input_chars_per_word).
#include "convert/wordpiece.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <unordered_map>

#include "convert/sha256.h"
#include "gguf/token_type.h"
#include "hf_vocab/hf_vocab.h"

namespace minfer::convert {
namespace {

using gguf::TokenType;
using nlohmann::json;

// get_vocab_base_pre's check text after BertNormalizer (clean_text, handle_chinese_chars,
// lowercase, accents stripped as lowercase implies) and BertPreTokenizer, as Hugging Face
// tokenizers 0.23 produces it (normalize_str, then pre_tokenize_str; written by
// tools/reference/wordpiece_check_words.py). The fingerprint depends on the
// vocabulary only through the WordPiece step below, so these words serve every uncased
// BERT vocabulary; the text contains none of the special tokens, so added tokens do not
// split it.
constexpr const char* kUncasedCheckWords[] = {
#include "convert/wordpiece_check_words.inc"
};

// convert_hf_to_gguf.py get_vocab_base_pre's fingerprints of WordPiece vocabularies. The
// converter tests them in turn and the last match wins: bge-small-en-v1.5 ("bert-bge")
// and jina-embeddings-v2-base-en share one, which is named "jina-v2-en".
struct Fingerprint {
  const char* sha256;
  const char* pre;
};
constexpr Fingerprint kFingerprints[] = {
    {"0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f", "jina-v2-en"},
    {"8e62295832751ca1e8f92f2226f403dea30dc5165e448b5bfa05af5340c64ec7", "bert-bge-large"},
    {"c7699093ba4255a91e702aa38a596aa81669f3525dae06c2953267dde580f448", "jina-v1-en"},
};

json get(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) ? obj[key] : json();
}

size_t n_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The WordPiece model's ids for one pre-tokenized word.
void encode_word(const std::string& word, const std::unordered_map<std::string, int64_t>& vocab,
                 const std::string& prefix, size_t max_chars, int64_t unk,
                 std::vector<int64_t>& out) {
  if (n_chars(word) > max_chars) {
    out.push_back(unk);
    return;
  }
  std::vector<int64_t> pieces;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    std::optional<int64_t> found;
    while (end > start) {
      const std::string sub = (start > 0 ? prefix : "") + word.substr(start, end - start);
      if (auto it = vocab.find(sub); it != vocab.end()) {
        found = it->second;
        break;
      }
      do {
        --end;  // back to the previous character boundary
      } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      out.push_back(unk);
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

// The post-processor's single-sequence template as (special ids, sequence) items.
Result<std::pair<std::vector<int64_t>, std::vector<int64_t>>> single_template(const json& tok) {
  const json pp = get(tok, "post_processor");
  const std::string type = get(pp, "type").is_string() ? pp["type"].get<std::string>() : "";
  std::vector<int64_t> before, after;
  if (type == "BertProcessing") {
    before.push_back(pp.at("cls").at(1).get<int64_t>());
    after.push_back(pp.at("sep").at(1).get<int64_t>());
    return std::pair(before, after);
  }
  if (type != "TemplateProcessing") {
    return make_error(fmt::format(
        "tokenizer.json: WordPiece post-processor \"{}\" is not supported by minfer convert",
        type));
  }
  bool seen_sequence = false;
  const json single = get(pp, "single");
  if (!single.is_array())
    return make_error("tokenizer.json: the post-processor has no single template");
  for (const json& item : single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const json id = get(get(item, "SpecialToken"), "id");
    const json ids = get(
        get(get(pp, "special_tokens"), id.is_string() ? id.get<std::string>().c_str() : ""), "ids");
    if (!ids.is_array()) {
      return make_error("tokenizer.json: a post-processor special token without ids");
    }
    for (const json& i : ids) (seen_sequence ? after : before).push_back(i.get<int64_t>());
  }
  return std::pair(before, after);
}

}  // namespace

Result<std::string> wordpiece_fingerprint(const json& tok) {
  const json norm = get(tok, "normalizer");
  const bool bert_uncased =
      get(norm, "type") == "BertNormalizer" && get(norm, "lowercase") == json(true) &&
      get(norm, "clean_text") != json(false) && get(norm, "handle_chinese_chars") != json(false) &&
      (get(norm, "strip_accents").is_null() || get(norm, "strip_accents") == json(true));
  if (!bert_uncased || get(get(tok, "pre_tokenizer"), "type") != "BertPreTokenizer") {
    return make_error(
        "tokenizer.json: only the uncased BERT normalizer (BertNormalizer with lowercase) and "
        "BertPreTokenizer are supported for WordPiece vocabularies");
  }
  const json model = get(tok, "model");
  std::unordered_map<std::string, int64_t> vocab;
  const json model_vocab = get(model, "vocab");
  if (!model_vocab.is_object()) return make_error("tokenizer.json: no WordPiece vocab");
  for (const auto& [t, id] : model_vocab.items()) vocab[t] = id.get<int64_t>();
  const std::string prefix = get(model, "continuing_subword_prefix").is_string()
                                 ? model["continuing_subword_prefix"].get<std::string>()
                                 : "##";
  const size_t max_chars = get(model, "max_input_chars_per_word").is_number_unsigned()
                               ? model["max_input_chars_per_word"].get<size_t>()
                               : 100;
  const std::string unk_token =
      get(model, "unk_token").is_string() ? model["unk_token"].get<std::string>() : "[UNK]";
  const auto unk = vocab.find(unk_token);
  if (unk == vocab.end()) {
    return make_error(
        fmt::format("tokenizer.json: the WordPiece unk_token '{}' is not in the vocab", unk_token));
  }
  MINFER_TRY(const auto tmpl, single_template(tok));
  std::vector<int64_t> ids = tmpl.first;
  for (const char* w : kUncasedCheckWords)
    encode_word(w, vocab, prefix, max_chars, unk->second, ids);
  ids.insert(ids.end(), tmpl.second.begin(), tmpl.second.end());
  std::string text = "[";
  for (size_t i = 0; i < ids.size(); ++i) text += (i ? ", " : "") + std::to_string(ids[i]);
  text += "]";
  return sha256_hex(text);
}

Result<WordPieceVocab> wordpiece_vocab(const json& tok, uint32_t n_vocab) {
  const json model = get(tok, "model");
  const std::string type = get(model, "type").is_string() ? model["type"].get<std::string>() : "";
  if (type != "WordPiece") {
    return make_error(fmt::format(
        "tokenizer.json is a \"{}\" tokenizer; BertModel is supported with WordPiece only", type));
  }
  if (!get(model, "vocab").is_object()) return make_error("tokenizer.json: no WordPiece vocab");
  // transformers' tokenizer.vocab: the model's vocab, then the added tokens over it.
  std::map<int64_t, std::string> by_id;
  for (const auto& [t, id] : model["vocab"].items()) by_id[id.get<int64_t>()] = t;
  struct Added {
    bool special;
  };
  std::map<int64_t, Added> added;
  const json added_list = get(tok, "added_tokens");
  if (!added_list.is_null() && !added_list.is_array()) {
    return make_error("tokenizer.json: \"added_tokens\" is not a list");
  }
  for (const json& a : added_list.is_array() ? added_list : json::array()) {
    const int64_t id = a.at("id").get<int64_t>();
    const std::string content = a.at("content").get<std::string>();
    const bool special = a.value("special", false);
    // get_vocab_base re-normalizes a non-normalized added token with decode(encode(t));
    // for a special token that is the identity, for others it depends on the whole
    // tokenizer, which this converter does not run.
    if (!special && !a.value("normalized", true)) {
      return make_error(fmt::format(
          "tokenizer.json: added token '{}' is neither special nor normalized; minfer convert "
          "does not support that for WordPiece vocabularies",
          content));
    }
    by_id[id] = content;
    added[id] = {special};
  }
  for (const auto& [id, t] : by_id) {
    if (id < 0 || id >= n_vocab) {
      return make_error(
          fmt::format("tokenizer.json: token '{}' has id {}, outside config.json's vocab_size {}",
                      t, id, n_vocab));
    }
  }
  WordPieceVocab v;
  MINFER_TRY(const std::string fp, wordpiece_fingerprint(tok));
  for (const Fingerprint& f : kFingerprints) {
    if (fp == f.sha256) v.pre = f.pre;  // the last match wins, as in the converter
  }
  if (v.pre.empty()) {
    return make_error(fmt::format(
        "tokenizer.json: a WordPiece vocabulary llama.cpp's converter does not recognise "
        "(fingerprint {}); it refuses it too",
        fp));
  }
  v.tokens.reserve(n_vocab);
  v.types.reserve(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens.push_back(fmt::format("[PAD{}]", i));
      v.types.push_back(static_cast<int32_t>(TokenType::kUnused));
      continue;
    }
    std::string t = it->second;
    TokenType tt = TokenType::kNormal;
    if (auto a = added.find(i); a != added.end()) {
      if (a->second.special || hf_vocab::looks_special(t)) {
        tt = TokenType::kControl;
      } else {
        tt = TokenType::kUserDefined;
        for (size_t p = 0; (p = t.find("\xe2\x96\x81", p)) != std::string::npos; ++p) {
          t.replace(p, 3, " ");  // pre-normalize "▁" (get_vocab_base)
        }
      }
    }
    // BertModel.set_vocab's phantom space: a control token stays, a "##" continuation
    // loses its prefix, any other token starts with "▁" (a word start).
    if (tt != TokenType::kControl) t = t.starts_with("##") ? t.substr(2) : "\xe2\x96\x81" + t;
    v.tokens.push_back(std::move(t));
    v.types.push_back(static_cast<int32_t>(tt));
  }
  return v;
}

}  // namespace minfer::convert
