// Stage 3b (HF vocabulary): builds the llama.cpp vocabulary metadata from tokenizer.json.
// Follows convert_hf_to_gguf.py (get_vocab_base, _set_vocab_gpt2, _set_vocab_llama_hf)
// and gguf-py/gguf/vocab.py (SpecialVocab, LlamaHfVocab); deviations are marked
// "Deviation:" with the reason.
#include "hf_vocab/hf_vocab.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <regex>
#include <unordered_map>

namespace minfer::hf_vocab {
namespace {

using nlohmann::json;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
};

std::vector<AddedToken> read_added(const json& tok) {
  std::vector<AddedToken> out;
  for (const json& a : tok.value("added_tokens", json::array())) {
    out.push_back({.id = a.at("id").get<int32_t>(),
                   .content = a.at("content").get<std::string>(),
                   .special = a.value("special", false),
                   .normalized = a.value("normalized", false)});
  }
  return out;
}

bool starts_with(const std::string& s, std::string_view p) {
  return s.rfind(p, 0) == 0;
}
bool ends_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Merges in "a b" form. tokenizer.json since transformers 4.45 may store [["a","b"],…]
// so that parts can hold spaces; the converter then writes a space inside a part as
// U+0120 ('Ġ', chr(ord(' ') + 256)) — vocab.py SpecialVocab._try_load_from_tokenizer_json.
Result<std::vector<std::string>> read_merges(const json& model) {
  std::vector<std::string> out;
  if (!model.contains("merges")) return out;
  const json& merges = model["merges"];
  out.reserve(merges.size());
  for (const json& m : merges) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.push_back(replace_all(m[0].get<std::string>(), " ", "\xc4\xa0") + " " +
                    replace_all(m[1].get<std::string>(), " ", "\xc4\xa0"));
    } else {
      return make_error(fmt::format("unknown merges format: {}", m.dump()));
    }
  }
  return out;
}

// tokenizer_config.json `{typ}_token`: a string or an AddedToken object.
std::optional<std::string> config_token(const json* config, const std::string& typ) {
  if (config == nullptr || !config->contains(typ + "_token")) return std::nullopt;
  const json& e = (*config)[typ + "_token"];
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("content") && e["content"].is_string()) {
    return e["content"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<int32_t> added_id(const std::vector<AddedToken>& added, const std::string& text) {
  for (const AddedToken& a : added) {
    if (a.content == text) return a.id;  // the first match, as SpecialVocab does
  }
  return std::nullopt;
}

std::optional<int32_t>* special_slot(SpecialTokens& s, const std::string& typ) {
  if (typ == "bos") return &s.bos;
  if (typ == "eos") return &s.eos;
  if (typ == "unk") return &s.unk;
  if (typ == "sep") return &s.sep;
  if (typ == "pad") return &s.pad;
  if (typ == "cls") return &s.cls;
  if (typ == "mask") return &s.mask;
  return nullptr;
}

std::optional<bool>* add_slot(SpecialTokens& s, const std::string& typ) {
  if (typ == "bos") return &s.add_bos;
  if (typ == "eos") return &s.add_eos;
  if (typ == "sep") return &s.add_sep;
  return nullptr;
}

// SpecialVocab: ids from tokenizer_config.json, add_* flags from the post-processor
// (a simple TemplateProcessing / RobertaProcessing) overridden by tokenizer_config.
SpecialTokens read_special(const json& tok, const json* config,
                           const std::vector<AddedToken>& added, int32_t n_vocab) {
  SpecialTokens s;
  std::optional<std::string> bos = config_token(config, "bos");
  std::optional<std::string> eos = config_token(config, "eos");
  const std::optional<std::string> cls = config_token(config, "cls");
  const std::optional<std::string> sep = config_token(config, "sep");
  if (!bos && cls) bos = cls;
  if (!eos && sep) eos = sep;

  std::optional<std::string> tmpl_bos, tmpl_eos;
  if (tok.contains("post_processor") && tok["post_processor"].is_object()) {
    const json& pp = tok["post_processor"];
    json list = pp.contains("processors") ? pp["processors"] : json::array({pp});
    for (const json& p : list) {
      const std::string type = p.value("type", "");
      if (type == "RobertaProcessing") {
        s.add_bos = s.add_eos = s.add_sep = true;
        continue;
      }
      if (type != "TemplateProcessing") continue;
      const json single = p.value("single", json::array());
      if (single.size() <= 1) continue;
      auto special_id = [](const json& item) -> std::optional<std::string> {
        if (item.contains("SpecialToken")) return item["SpecialToken"].value("id", "");
        return std::nullopt;
      };
      if (auto first = special_id(single.front())) {
        tmpl_bos = first;
        s.add_bos = config == nullptr || first == bos || first == cls;
      }
      if (auto last = special_id(single.back())) {
        tmpl_eos = last;
        // A config EOS that differs from the template's last token is replaced by it
        // (the converter keeps the old one as EOT/EOM; none of our inputs need that).
        if (config != nullptr) eos = last;
        s.add_eos = true;
      }
    }
  }

  auto set_id = [&](const std::string& typ, const std::optional<std::string>& text) {
    if (!text) return;
    std::optional<int32_t>* slot = special_slot(s, typ);
    if (slot->has_value()) return;
    std::optional<int32_t> id = added_id(added, *text);
    if (id && *id >= 0 && *id < n_vocab) *slot = id;
  };

  if (config == nullptr) {
    // Deviation: without tokenizer_config.json SpecialVocab sets no ids at all (it
    // returns before reading any); we take BOS/EOS from the post-processor template and
    // UNK from the model, which is what the template and model say they are.
    set_id("bos", tmpl_bos);
    set_id("eos", tmpl_eos);
    const json& model = tok["model"];
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      set_id("unk", model["unk_token"].get<std::string>());
    }
    return s;
  }
  for (const std::string typ : {"bos", "eos", "unk", "sep", "pad", "cls", "mask"}) {
    const std::string add_key = "add_" + typ + "_token";
    if (config->contains(add_key) && (*config)[add_key].is_boolean()) {
      if (std::optional<bool>* a = add_slot(s, typ)) *a = (*config)[add_key].get<bool>();
    }
    std::optional<std::string> text = config_token(config, typ);
    if (typ == "bos") text = bos;
    if (typ == "eos") text = eos;
    set_id(typ, text);
  }
  return s;
}

void read_chat_template(const json* config, Vocab& v) {
  if (config == nullptr || !config->contains("chat_template")) return;
  const json& t = (*config)["chat_template"];
  if (t.is_string()) {
    v.chat_template = t.get<std::string>();
  } else if (t.is_array()) {
    // GGUFWriter.add_chat_template: "default" → tokenizer.chat_template, the others →
    // tokenizer.chat_template.<name>.
    for (const json& e : t) {
      const std::string name = e.value("name", "");
      const std::string tmpl = e.value("template", "");
      if (name == "default") {
        v.chat_template = tmpl;
      } else if (!name.empty()) {
        v.named_templates.emplace_back(name, tmpl);
      }
    }
  }
}

// SentencePiece's add_dummy_prefix, as tokenizer.json spells it: a Prepend("▁")
// normalizer (Llama 2 style) or a Metaspace pre-tokenizer that adds a prefix space.
std::optional<bool> read_add_space_prefix(const json& tok) {
  bool prepend = false, found = false;
  auto walk_norm = [&](const json& n, auto&& self) -> void {
    if (!n.is_object()) return;
    const std::string type = n.value("type", "");
    if (type == "Sequence") {
      for (const json& c : n.value("normalizers", json::array())) self(c, self);
    } else if (type == "Prepend") {
      found = true;
      prepend = prepend || n.value("prepend", "") == "\xe2\x96\x81";
    }
  };
  if (tok.contains("normalizer")) walk_norm(tok["normalizer"], walk_norm);
  if (tok.contains("pre_tokenizer") && tok["pre_tokenizer"].is_object()) {
    const json& p = tok["pre_tokenizer"];
    json list = p.value("type", "") == "Sequence" ? p.value("pretokenizers", json::array())
                                                  : json::array({p});
    for (const json& s : list) {
      if (s.value("type", "") != "Metaspace") continue;
      found = true;
      if (s.contains("prepend_scheme")) {
        prepend = prepend || s["prepend_scheme"].get<std::string>() != "never";
      } else {
        prepend = prepend || s.value("add_prefix_space", true);
      }
    }
  }
  if (!found) return false;
  return prepend;
}

bool is_byte_token(const std::string& t) {
  static const std::regex kByte("<0x[0-9A-Fa-f]{2}>");
  return std::regex_match(t, kByte);
}

}  // namespace

bool looks_special(const std::string& t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts_with(t, "<|") && ends_with(t, "|>")) return true;
  if (starts_with(t, "<\xef\xbd\x9c") && ends_with(t, "\xef\xbd\x9c>")) return true;  // <｜ ｜>
  if (starts_with(t, "<unused") && ends_with(t, ">")) return true;
  return false;
}

Result<Vocab> build_vocab(const json& tok, const json* config, const Options& opts) {
  if (!tok.contains("model") || !tok["model"].is_object()) {
    return make_error("tokenizer.json has no \"model\" object");
  }
  const json& model = tok["model"];
  const std::string model_type = model.value("type", "");
  if (model_type != "BPE") {
    return make_error(
        fmt::format("unsupported tokenizer model type \"{}\" (only BPE)", model_type));
  }
  const bool byte_fallback = model.value("byte_fallback", false);
  const std::string decoder_type =
      tok.contains("decoder") && tok["decoder"].is_object() ? tok["decoder"].value("type", "") : "";

  Vocab v;
  // LlamaHfVocab: BPE with byte fallback and a Sequence decoder (Replace ▁, ByteFallback,
  // Fuse, Strip) is SentencePiece BPE; BpeVocab: no byte fallback, ByteLevel decoder.
  if (byte_fallback && decoder_type == "Sequence") {
    v.model = "llama";
    v.pre = opts.pre.empty() ? "default" : opts.pre;
  } else if (!byte_fallback && decoder_type == "ByteLevel") {
    v.model = "gpt2";
    if (!opts.pre.empty()) {
      v.pre = opts.pre;
    } else {
      MINFER_TRY(v.pre, detect_pre(tok.value("pre_tokenizer", json())));
    }
  } else {
    return make_error(fmt::format(
        "unsupported BPE flavour (byte_fallback={}, decoder \"{}\"): neither byte-level BPE "
        "nor SentencePiece-style BPE",
        byte_fallback, decoder_type));
  }

  // All ids: the model's vocab plus the added tokens (transformers' tokenizer.vocab).
  const std::vector<AddedToken> added = read_added(tok);
  std::unordered_map<int32_t, std::string> by_id;
  int32_t max_id = -1;
  for (const auto& [text, id_json] : model.at("vocab").items()) {
    const int32_t id = id_json.get<int32_t>();
    if (id < 0) return make_error(fmt::format("negative id {} for \"{}\"", id, text));
    by_id[id] = text;
    max_id = std::max(max_id, id);
  }
  std::map<int32_t, const AddedToken*> added_by_id;
  for (const AddedToken& a : added) {
    by_id[a.id] = a.content;
    added_by_id[a.id] = &a;
    max_id = std::max(max_id, a.id);
  }
  int32_t n_vocab = max_id + 1;
  if (opts.vocab_size != 0) {
    if (static_cast<int64_t>(opts.vocab_size) < n_vocab) {
      return make_error(fmt::format("vocabulary size {} is below the largest token id + 1 ({})",
                                    opts.vocab_size, n_vocab));
    }
    n_vocab = static_cast<int32_t>(opts.vocab_size);
  }

  std::vector<std::string> merges;
  MINFER_TRY(merges, read_merges(model));
  v.special = read_special(tok, config, added, n_vocab);
  read_chat_template(config, v);

  // The SentencePiece score of a merged piece decides which pair llama.cpp merges
  // first; HF BPE decides by merge rank. Deviation: LlamaHfVocab writes -1000 for every
  // score, which makes llama.cpp merge leftmost-first (not what the model was trained
  // with); we write -rank of the first merge that makes the token, so llama.cpp picks
  // pairs in HF's order. Tokens no merge makes (single characters) rank below all merges
  // in id order; they are never the result of a merge, so their score is not used.
  std::unordered_map<std::string, int32_t> merge_rank;
  if (v.model == "llama") {
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) return make_error(fmt::format("bad merge \"{}\"", m));
      merge_rank.emplace(m.substr(0, sp) + m.substr(sp + 1), static_cast<int32_t>(r));
    }
  }

  v.tokens.reserve(static_cast<size_t>(n_vocab));
  v.types.reserve(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens.push_back(fmt::format("[PAD{}]", i));
      v.types.push_back(static_cast<int32_t>(TokenType::kUnused));
      if (v.model == "llama") v.scores.push_back(0.0f);
      continue;
    }
    std::string text = it->second;
    TokenType type = TokenType::kNormal;
    auto ai = added_by_id.find(i);
    const bool is_added = ai != added_by_id.end();
    if (v.model == "gpt2") {
      // get_vocab_base. (It also re-normalizes non-normalized added tokens with
      // decode(encode(t)); for byte-level BPE that is the identity.)
      if (is_added) {
        if (ai->second->special || looks_special(text)) {
          type = TokenType::kControl;
        } else {
          text = replace_all(text, "\xe2\x96\x81", " ");  // pre-normalize "▁" (Gemma)
          type = TokenType::kUserDefined;
        }
      }
    } else {
      // LlamaHfVocab.get_token_type: byte tokens first, then special → CONTROL.
      // Deviation: the unknown token is UNKNOWN (as SentencePieceVocab writes it from
      // tokenizer.model), not CONTROL.
      if (is_byte_token(text)) {
        type = TokenType::kByte;
      } else if (is_added && ai->second->special) {
        type = (v.special.unk && *v.special.unk == i) ? TokenType::kUnknown : TokenType::kControl;
      } else if (is_added && !model.at("vocab").contains(text)) {
        type = TokenType::kUserDefined;
      }
      float score = 0.0f;
      if (type == TokenType::kNormal) {
        auto r = merge_rank.find(text);
        score = r != merge_rank.end()
                    ? -static_cast<float>(r->second)
                    : -static_cast<float>(static_cast<int64_t>(merges.size()) + i);
      }
      v.scores.push_back(score);
    }
    v.tokens.push_back(std::move(text));
    v.types.push_back(static_cast<int32_t>(type));
  }

  if (v.model == "gpt2") {
    v.merges = std::move(merges);  // SpecialVocab(load_merges=True)
  } else {
    v.add_space_prefix = read_add_space_prefix(tok);
  }
  return v;
}

gguf::Writer to_writer(const Vocab& v, const Options& opts) {
  using gguf::Value;
  gguf::Writer w;
  w.set("general.architecture", Value::string(opts.arch));
  if (!opts.name.empty()) w.set("general.name", Value::string(opts.name));
  w.set("tokenizer.ggml.model", Value::string(v.model));
  w.set("tokenizer.ggml.pre", Value::string(v.pre));
  w.set("tokenizer.ggml.tokens", Value::string_array(v.tokens));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", Value::f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(v.types));
  if (!v.merges.empty()) w.set("tokenizer.ggml.merges", Value::string_array(v.merges));
  if (v.add_space_prefix) {
    w.set("tokenizer.ggml.add_space_prefix", Value::boolean(*v.add_space_prefix));
  }
  // Key names as gguf-py's constants spell them ("seperator" included).
  const std::pair<const char*, const std::optional<int32_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &v.special.bos},
      {"tokenizer.ggml.eos_token_id", &v.special.eos},
      {"tokenizer.ggml.unknown_token_id", &v.special.unk},
      {"tokenizer.ggml.seperator_token_id", &v.special.sep},
      {"tokenizer.ggml.padding_token_id", &v.special.pad},
      {"tokenizer.ggml.cls_token_id", &v.special.cls},
      {"tokenizer.ggml.mask_token_id", &v.special.mask},
  };
  for (const auto& [key, id] : ids) {
    if (id->has_value()) w.set(key, Value::u32(static_cast<uint32_t>(**id)));
  }
  const std::pair<const char*, const std::optional<bool>*> flags[] = {
      {"tokenizer.ggml.add_bos_token", &v.special.add_bos},
      {"tokenizer.ggml.add_eos_token", &v.special.add_eos},
      {"tokenizer.ggml.add_sep_token", &v.special.add_sep},
  };
  for (const auto& [key, flag] : flags) {
    if (flag->has_value()) w.set(key, Value::boolean(**flag));
  }
  if (!v.chat_template.empty()) w.set("tokenizer.chat_template", Value::string(v.chat_template));
  for (const auto& [name, tmpl] : v.named_templates) {
    w.set("tokenizer.chat_template." + name, Value::string(tmpl));
  }
  return w;
}

}  // namespace minfer::hf_vocab
