// Stage 4 (text → ids): building the vocabulary — GGUF metadata → VocabData →
// VocabTokenizer, with llama.cpp's defaults, attribute rules and end-of-generation set
// (src/llama-vocab.cpp, llama_vocab::impl::load).
// Invariants: token texts are unique; every special id is in range or kNoToken;
// add_bos/add_eos imply a BOS/EOS id; the eog set contains eos, eot and eom when set;
// a WordPiece vocabulary has an unknown token.
#include <algorithm>
#include <array>

#include "gguf/gguf.h"
#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {

uint32_t attr_from_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// Token texts llama.cpp recognises when the metadata leaves an id unset.
const std::initializer_list<std::string_view> kEotTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
    "<end_of_utterance>"};
const std::initializer_list<std::string_view> kEomTexts = {"<|eom_id|>"};
const std::initializer_list<std::string_view> kFimPreTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",    "<\uFF5Cfim\u2581begin\uFF5C>",
    "<PRE>",          "\u2581<PRE>",  "<|code_prefix|>", "<|prefix|>"};
const std::initializer_list<std::string_view> kFimSufTexts = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",    "<\uFF5Cfim\u2581hole\uFF5C>",
    "<SUF>",          "\u2581<SUF>",  "<|code_suffix|>", "<|suffix|>"};
const std::initializer_list<std::string_view> kFimMidTexts = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",    "<\uFF5Cfim\u2581end\uFF5C>",
    "<MID>",          "\u2581<MID>",  "<|code_middle|>", "<|middle|>"};
const std::initializer_list<std::string_view> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>",
                                                              "<fim_pad>", "<PAD>", "[PAD]"};
const std::initializer_list<std::string_view> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>",
                                                              "<fim-repo>", "<REPO>", "<reponame>"};
const std::initializer_list<std::string_view> kFimSepTexts = {"<|file_sep|>"};
// Texts that end generation whatever the metadata says.
const std::initializer_list<std::string_view> kEogTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
    "[e~["};

// Optional token id from metadata: absent, or stored as a negative number → nullopt.
Result<std::optional<TokenId>> read_id(const gguf::Model& m, std::string_view key) {
  if (!m.has(key)) return std::optional<TokenId>{};
  MINFER_TRY(const int64_t v, m.get_i64(key));
  if (v < 0 || v > INT32_MAX) return std::optional<TokenId>{};
  return std::optional<TokenId>{static_cast<TokenId>(v)};
}

Result<std::optional<bool>> read_bool(const gguf::Model& m, std::string_view key) {
  if (!m.has(key)) return std::optional<bool>{};
  MINFER_TRY(const bool v, m.get_bool(key));
  return std::optional<bool>{v};
}

Result<std::string> read_string_or_empty(const gguf::Model& m, std::string_view key) {
  if (!m.has(key)) return std::string();
  return m.get_string(key);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::Model& model) {
  VocabData d;
  MINFER_TRY(d.model, model.get_string("tokenizer.ggml.model"));
  MINFER_TRY(d.pre, read_string_or_empty(model, "tokenizer.ggml.pre"));
  MINFER_TRY(d.tokens, model.get_string_array("tokenizer.ggml.tokens"));
  if (model.has("tokenizer.ggml.scores")) {
    auto scores = model.get_f32_array("tokenizer.ggml.scores");
    if (scores.ok()) {
      d.scores = std::move(scores).value();
    } else {  // llama.cpp also accepts integer scores
      MINFER_TRY(const std::vector<int32_t> iscores, model.get_i32_array("tokenizer.ggml.scores"));
      d.scores.assign(iscores.begin(), iscores.end());
    }
  }
  if (model.has("tokenizer.ggml.token_type")) {
    MINFER_TRY(d.token_types, model.get_i32_array("tokenizer.ggml.token_type"));
  }
  if (model.has("tokenizer.ggml.merges")) {
    MINFER_TRY(d.merges, model.get_string_array("tokenizer.ggml.merges"));
  }
  struct IdKey {
    std::optional<TokenId>* dst;
    const char* key;
  };
  const std::array<IdKey, 17> ids = {{
      {&d.bos, "tokenizer.ggml.bos_token_id"},
      {&d.eos, "tokenizer.ggml.eos_token_id"},
      {&d.eot, "tokenizer.ggml.eot_token_id"},
      {&d.eom, "tokenizer.ggml.eom_token_id"},
      {&d.unk, "tokenizer.ggml.unknown_token_id"},
      {&d.sep, "tokenizer.ggml.seperator_token_id"},  // sic: the GGUF key's spelling
      {&d.pad, "tokenizer.ggml.padding_token_id"},
      {&d.mask, "tokenizer.ggml.mask_token_id"},
      {&d.fim_pre, "tokenizer.ggml.fim_pre_token_id"},
      {&d.fim_suf, "tokenizer.ggml.fim_suf_token_id"},
      {&d.fim_mid, "tokenizer.ggml.fim_mid_token_id"},
      {&d.fim_pad, "tokenizer.ggml.fim_pad_token_id"},
      {&d.fim_rep, "tokenizer.ggml.fim_rep_token_id"},
      {&d.fim_sep, "tokenizer.ggml.fim_sep_token_id"},
      // Deprecated spellings, read after the new ones as llama.cpp does.
      {&d.fim_pre, "tokenizer.ggml.prefix_token_id"},
      {&d.fim_suf, "tokenizer.ggml.suffix_token_id"},
      {&d.fim_mid, "tokenizer.ggml.middle_token_id"},
  }};
  for (const auto& [dst, key] : ids) {
    MINFER_TRY(const std::optional<TokenId> v, read_id(model, key));
    if (v) *dst = v;
  }
  MINFER_TRY(d.add_bos, read_bool(model, "tokenizer.ggml.add_bos_token"));
  MINFER_TRY(d.add_eos, read_bool(model, "tokenizer.ggml.add_eos_token"));
  MINFER_TRY(d.add_space_prefix, read_bool(model, "tokenizer.ggml.add_space_prefix"));
  MINFER_TRY(d.add_sep, read_bool(model, "tokenizer.ggml.add_sep_token"));
  MINFER_TRY(d.lowercase, read_bool(model, "tokenizer.ggml.normalizer.lowercase"));
  MINFER_TRY(d.strip_accents, read_bool(model, "tokenizer.ggml.normalizer.strip_accents"));
  MINFER_TRY(d.chat_template, read_string_or_empty(model, "tokenizer.chat_template"));
  MINFER_TRY(d.general_name, read_string_or_empty(model, "general.name"));
  MINFER_TRY(d.general_arch, read_string_or_empty(model, "general.architecture"));
  return from_vocab(std::move(d));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(VocabData data) {
  return VocabTokenizer::build(std::move(data));
}

Result<std::unique_ptr<Tokenizer>> VocabTokenizer::build(VocabData data) {
  std::unique_ptr<VocabTokenizer> tok(new VocabTokenizer());
  MINFER_TRY_STATUS(tok->load(data));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Status VocabTokenizer::load(VocabData& d) {
  model_ = d.model;
  pre_ = d.pre;
  chat_template_ = std::move(d.chat_template);
  const size_t n_tokens = d.tokens.size();
  if (n_tokens == 0) return make_error("tokenizer.ggml.tokens is empty");

  // Model type and llama.cpp's defaults for it.
  TokenId def_bos = kNoToken, def_eos = kNoToken, def_unk = kNoToken;
  TokenId def_sep = kNoToken, def_pad = kNoToken, def_mask = kNoToken;
  bool add_bos = false;
  bool add_space_prefix = false;
  if (d.model == "llama") {
    type_ = VocabType::kSpm;
    def_bos = 1, def_eos = 2, def_unk = 0;
    add_space_prefix = true;
    add_bos = true;
  } else if (d.model == "gpt2") {
    type_ = VocabType::kBpe;
    def_bos = 11, def_eos = 11;
    if (d.merges.empty()) return make_error("BPE vocabulary without tokenizer.ggml.merges");
    for (size_t i = 0; i < d.merges.size(); ++i) {
      const std::string& m = d.merges[i];
      const size_t sp = m.find(' ', 1);
      std::string key = sp == std::string::npos ? std::string(" ") : m;
      bpe_ranks_.emplace(std::move(key), static_cast<int>(i));  // first occurrence wins
    }
    MINFER_TRY(PreTokenizerSpec spec, find_pre_tokenizer(d.pre));
    MINFER_TRY(PreTokenizer pre, PreTokenizer::create(spec.regexes));
    pre_tokenizer_ = std::move(pre);
    ignore_merges_ = spec.ignore_merges;
    add_bos = spec.default_add_bos;
    if (spec.no_bos) def_bos = kNoToken;
  } else if (d.model == "bert") {
    // BERT's vocab.txt layout: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
    type_ = VocabType::kWpm;
    def_bos = 101, def_unk = 100, def_sep = 102, def_pad = 0, def_mask = 103;
    add_bos = true;
    wpm_lowercase_ = d.lowercase.value_or(true);
    wpm_strip_accents_ = d.strip_accents.value_or(wpm_lowercase_);
    // Older converters wrote no add_eos flag; llama.cpp then closes every sequence
    // with [SEP] (tokenizers' "[CLS] $A [SEP]" template). With the flag, it decides.
    wpm_close_with_sep_ = !d.add_eos.has_value();
    drop_first_space_ = true;
  } else {
    return make_error("unknown tokenizer model '" + d.model +
                      "' (tokenizer.ggml.model); minfer supports 'gpt2', 'llama' and 'bert'");
  }
  if (d.add_space_prefix) add_space_prefix = *d.add_space_prefix;

  // Tokens, scores, types.
  if (!d.scores.empty() && d.scores.size() < n_tokens) {
    return make_error("tokenizer.ggml.scores has " + std::to_string(d.scores.size()) +
                      " entries for " + std::to_string(n_tokens) + " tokens");
  }
  if (!d.token_types.empty() && d.token_types.size() < n_tokens) {
    return make_error("tokenizer.ggml.token_type has " + std::to_string(d.token_types.size()) +
                      " entries for " + std::to_string(n_tokens) + " tokens");
  }
  tokens_ = std::move(d.tokens);
  scores_.assign(n_tokens, 0.0f);
  types_.assign(n_tokens, TokenType::kNormal);
  attrs_.assign(n_tokens, kAttrNormal);
  token_to_id_.reserve(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    if (tokens_[i].empty()) tokens_[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    const auto [it, fresh] = token_to_id_.emplace(tokens_[i], static_cast<TokenId>(i));
    if (!fresh) {
      return make_error("duplicate token in vocabulary: '" + tokens_[i] + "' has ids " +
                        std::to_string(it->second) + " and " + std::to_string(i));
    }
    if (!d.scores.empty()) scores_[i] = d.scores[i];
    if (!d.token_types.empty()) {
      types_[i] = static_cast<TokenType>(d.token_types[i]);
      attrs_[i] = attr_from_type(d.token_types[i]);
    }
  }

  // Special ids: defaults out of range are dropped; metadata ids out of range are
  // ignored (the default stays), as llama.cpp does.
  auto resolve = [&](TokenId def, const std::optional<TokenId>& meta) {
    TokenId id = (def >= 0 && static_cast<size_t>(def) >= n_tokens) ? kNoToken : def;
    if (meta && *meta >= 0 && static_cast<size_t>(*meta) < n_tokens) id = *meta;
    return id;
  };
  SpecialIds& s = special_;
  s.bos = resolve(def_bos, d.bos);
  s.eos = resolve(def_eos, d.eos);
  s.unk = resolve(def_unk, d.unk);
  s.eot = resolve(kNoToken, d.eot);
  s.eom = resolve(kNoToken, d.eom);
  s.sep = resolve(def_sep, d.sep);
  s.pad = resolve(def_pad, d.pad);
  s.mask = resolve(def_mask, d.mask);
  s.fim_pre = resolve(kNoToken, d.fim_pre);
  s.fim_suf = resolve(kNoToken, d.fim_suf);
  s.fim_mid = resolve(kNoToken, d.fim_mid);
  s.fim_pad = resolve(kNoToken, d.fim_pad);
  s.fim_rep = resolve(kNoToken, d.fim_rep);
  s.fim_sep = resolve(kNoToken, d.fim_sep);
  s.add_bos = d.add_bos.value_or(add_bos);
  s.add_eos = d.add_eos.value_or(false);
  s.add_space_prefix = add_space_prefix;
  if (s.add_bos && s.bos == kNoToken) {
    return make_error(
        "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  }
  if (s.add_eos && s.eos == kNoToken) {
    return make_error(
        "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  }
  if (type_ == VocabType::kWpm) {
    if (s.unk == kNoToken) {
      return make_error(
          "WordPiece vocabulary without an unknown token (tokenizer.ggml.unknown_token_id)");
    }
    if (wpm_close_with_sep_ && s.sep == kNoToken) {
      return make_error(
          "WordPiece vocabulary without tokenizer.ggml.add_eos_token needs a separator "
          "token (tokenizer.ggml.seperator_token_id)");
    }
    for (const std::string& t : tokens_)
      wpm_max_token_len_ = std::max(wpm_max_token_len_, t.size());
  }

  // Unset ids found by their text; such tokens become control. llama.cpp walks a hash
  // map here, so with several candidates its pick is unspecified; we take the first
  // text of the list that exists (<|eot_id|> before <|end_of_text|>, <|im_end|> before
  // <|endoftext|>), which is what llama.cpp reports for Llama 3 and Qwen2 models.
  auto detect = [&](TokenId& slot, const std::initializer_list<std::string_view>& texts) {
    if (slot != kNoToken) return;
    for (const std::string_view text : texts) {
      const TokenId id = find_token(text);
      if (id != kNoToken) {
        slot = id;
        attrs_[static_cast<size_t>(id)] |= kAttrControl;
        return;
      }
    }
  };
  detect(s.eot, kEotTexts);
  detect(s.eom, kEomTexts);
  detect(s.fim_pre, kFimPreTexts);
  detect(s.fim_suf, kFimSufTexts);
  detect(s.fim_mid, kFimMidTexts);
  detect(s.fim_pad, kFimPadTexts);
  detect(s.fim_rep, kFimRepTexts);
  detect(s.fim_sep, kFimSepTexts);

  // Control tokens named "unused" are unused.
  for (size_t i = 0; i < n_tokens; ++i) {
    if ((attrs_[i] & kAttrControl) && tokens_[i].find("unused") != std::string::npos) {
      attrs_[i] |= kAttrUnused;
    }
  }

  build_eog();

  // Every control, user-defined and unknown token, longest text first (ties by id;
  // llama.cpp's std::sort leaves tie order unspecified).
  for (size_t i = 0; i < n_tokens; ++i) {
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_cache_.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(special_cache_.begin(), special_cache_.end(), [&](TokenId a, TokenId b) {
    return tokens_[static_cast<size_t>(a)].size() > tokens_[static_cast<size_t>(b)].size();
  });

  apply_name_rules(d);
  return Ok{};
}

void VocabTokenizer::build_eog() {
  SpecialIds& s = special_;
  std::vector<TokenId> eog;
  auto add = [&](TokenId id) {
    if (id != kNoToken && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
  };
  auto remove = [&](TokenId id) { eog.erase(std::remove(eog.begin(), eog.end(), id), eog.end()); };
  add(s.fim_pad);
  add(s.fim_rep);
  add(s.fim_sep);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (is_one_of(tokens_[i], kEogTexts)) {
      add(static_cast<TokenId>(i));
      attrs_[i] |= kAttrControl;
    }
  }
  // gpt-oss channel markers are always rendered (llama.cpp makes them user-defined).
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (is_one_of(tokens_[i], {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      attrs_[i] = kAttrUserDefined;
    }
  }
  add(s.eos);
  add(s.eot);
  add(s.eom);
  // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
  bool has_return = false, has_call = false, has_flush = false;
  TokenId end_id = kNoToken;
  for (TokenId id : eog) {
    const std::string& t = tokens_[static_cast<size_t>(id)];
    if (t == "<|return|>")
      has_return = true;
    else if (t == "<|call|>" || t == "<|calls|>")
      has_call = true;
    else if (t == "<|flush|>")
      has_flush = true;
    else if (t == "<|end|>")
      end_id = id;
  }
  if (end_id != kNoToken && ((has_return && has_call) || (has_call && has_flush))) {
    remove(end_id);
    attrs_[static_cast<size_t>(end_id)] = kAttrUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not an end when "<|tool_response>" is.
  bool has_tool_response = false;
  TokenId s_id = kNoToken;
  for (TokenId id : eog) {
    const std::string& t = tokens_[static_cast<size_t>(id)];
    if (t == "<|tool_response>")
      has_tool_response = true;
    else if (t == "</s>")
      s_id = id;
  }
  if (has_tool_response && s_id != kNoToken) {
    remove(s_id);
    attrs_[static_cast<size_t>(s_id)] = kAttrNormal;
  }
  std::sort(eog.begin(), eog.end());
  s.eog = std::move(eog);
}

void VocabTokenizer::apply_name_rules(const VocabData& d) {
  auto contains_any = [](const std::string& s, std::initializer_list<std::string_view> subs) {
    for (auto sub : subs) {
      if (s.find(sub) != std::string::npos) return true;
    }
    return false;
  };
  auto set = [&](std::string_view text, uint32_t attr, bool on) {
    const TokenId id = find_token(text);
    if (id == kNoToken) return;  // llama.cpp would throw; a missing token has nothing to strip
    uint32_t& a = attrs_[static_cast<size_t>(id)];
    a = on ? (a | attr) : (a & ~attr);
  };
  std::string name = d.general_name;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; });
  if (contains_any(d.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(d.general_arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kAttrLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (TokenId id : special_cache_) attrs_[static_cast<size_t>(id)] |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, kAttrRstrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", kAttrLstrip, true);
  }
}

TokenId VocabTokenizer::find_token(std::string_view text) const {
  const auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? kNoToken : it->second;
}

}  // namespace minfer::tokenizer
