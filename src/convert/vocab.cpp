// Stage 3b (convert): the vocabulary keys of a converted checkpoint. Tokens, types and
// merges come from hf_vocab (the byte-level BPE path of get_vocab_base /
// _set_vocab_gpt2), or from wordpiece.cpp for BERT (BertModel.set_vocab); the
// special-token ids and add_* flags follow gguf-py's SpecialVocab step by step, because
// their order in the file is the order SpecialVocab finds them: tokenizer_config.json
// first (bos, eos, unk, sep, pad, cls, mask), then config.json's *_token_id for the
// types still unset; add flags from the tokenizer.json post-processor first (a pair
// template decides add_sep), then tokenizer_config.json's add_*_token.
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "convert/metadata.h"
#include "convert/wordpiece.h"
#include "hf_vocab/hf_vocab.h"

namespace minfer::convert {
namespace {

namespace fs = std::filesystem;
using gguf::Value;
using nlohmann::json;

// Python truthiness of a JSON value read with dict.get (None, "" and {} are false).
bool truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_object() || v.is_array()) return !v.empty();
  if (v.is_boolean()) return v.get<bool>();
  return true;
}

json get(const json& obj, const std::string& key) {
  return obj.is_object() && obj.contains(key) ? obj[key] : json();
}

// An insertion-ordered map, as Python dicts are.
template <typename T>
struct Ordered {
  std::vector<std::pair<std::string, T>> items;
  T* find(const std::string& k) {
    for (auto& [key, v] : items) {
      if (key == k) return &v;
    }
    return nullptr;
  }
  void set(const std::string& k, T v) {
    if (T* p = find(k)) {
      *p = v;
    } else {
      items.emplace_back(k, v);
    }
  }
  void setdefault(const std::string& k, T v) {
    if (!find(k)) items.emplace_back(k, v);
  }
};

struct Special {
  std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  Ordered<int64_t> ids;
  Ordered<bool> add;
  void set_id(const std::string& typ, const json& tid) {
    if (!tid.is_number_integer() || ids.find(typ)) return;
    ids.items.emplace_back(typ, tid.get<int64_t>());
  }
};

// SpecialVocab._try_load_from_tokenizer_json's post-processor walk (single templates
// only decide the bos/eos flags; a pair template decides add_sep).
void read_post_processor(const json& tok, json& tc, bool have_tc, Special& s) {
  json special_bos = get(tc, "bos_token"), special_cls = get(tc, "cls_token");
  json special_eos = get(tc, "eos_token"), special_sep = get(tc, "sep_token");
  if (!truthy(special_bos) && truthy(special_cls) && have_tc)
    tc["bos_token"] = special_bos = special_cls;
  if (!truthy(special_eos) && truthy(special_sep) && have_tc)
    tc["eos_token"] = special_eos = special_sep;
  const json pp = get(tok, "post_processor");
  if (!truthy(pp)) return;
  const json list = pp.contains("processors") ? pp["processors"] : json::array({pp});
  for (const json& p : list) {
    const std::string type = get(p, "type").is_string() ? p["type"].get<std::string>() : "";
    if (type == "ByteLevel") {
      s.add.setdefault("bos", false);
      s.add.setdefault("eos", false);
    } else if (type == "RobertaProcessing") {
      s.add.set("bos", true);
      s.add.set("eos", true);
      s.add.set("sep", true);
      if (!truthy(special_cls) && have_tc) {
        special_cls = p.contains("cls") ? p["cls"][0] : special_bos;
        tc["cls_token"] = special_cls;
      }
      if (!truthy(special_sep) && have_tc) {
        special_sep = p.contains("sep") ? p["sep"][0] : special_eos;
        tc["sep_token"] = special_sep;
      }
    } else if (type == "TemplateProcessing") {
      const json single = get(p, "single");
      json pair = get(p, "pair");
      json first, last;  // the single template's leading / trailing special tokens
      if (single.is_array() && single.size() > 1) {
        first = get(get(single.front(), "SpecialToken"), "id");
        if (truthy(first)) {
          if (!have_tc) {
            special_bos = first;
          } else if (first != special_bos && first != special_cls) {
            if (!truthy(special_bos)) tc["bos_token"] = special_bos = first;
            if (!truthy(special_cls)) tc["cls_token"] = special_cls = first;
          }
          s.add.set("bos", first == special_bos || first == special_cls);
        }
        last = get(get(single.back(), "SpecialToken"), "id");
        if (truthy(last)) {
          if (!have_tc) {
            special_eos = last;
          } else if (last != special_eos) {
            // The old EOS is kept as EOT (or EOM when EOT is taken).
            const std::string keep = s.types.size() == 7 ? "eot" : "eom";
            if (s.types.size() < 9) {
              s.types.push_back(keep);
              tc[keep + "_token"] = special_eos;
            }
            tc["eos_token"] = special_eos = last;
          }
          s.add.set("eos", last == special_eos);
        }
      }
      // The pair template decides add_sep: "A [sep] B" or "A [sep] [sep] B" once the
      // single template's leading / trailing tokens are cut off.
      if (!pair.is_array() || pair.empty()) continue;
      const auto special_of = [](const json& item) { return get(get(item, "SpecialToken"), "id"); };
      const size_t start = truthy(first) && special_of(pair.front()) == first ? 1 : 0;
      const size_t stop = truthy(last) && special_of(pair.back()) == last ? 1 : 0;
      if (start + stop >= pair.size()) continue;
      const json mid(pair.begin() + static_cast<std::ptrdiff_t>(start),
                     pair.end() - static_cast<std::ptrdiff_t>(stop));
      const json a = get(get(mid.front(), "Sequence"), "id");
      const json b = get(get(mid.back(), "Sequence"), "id");
      if (a != "A" || b != "B" || mid.size() <= 2) continue;
      const json inner(mid.begin() + 1, mid.end() - 1);
      bool add_sep = false;
      const json e0 = special_of(inner[0]);
      if (truthy(e0) && (e0 == special_sep || e0 == special_eos) && !truthy(last)) add_sep = true;
      if (inner.size() == 2) {
        const json e1 = special_of(inner[1]);
        if (truthy(e1) && (e1 == special_sep || e1 == special_eos)) add_sep = true;
      }
      s.add.set("sep", add_sep);
      if (add_sep && !truthy(special_sep) && have_tc) tc["sep_token"] = special_eos;
    }
  }
}

Result<std::optional<json>> read_optional_json(const fs::path& p) {
  if (!fs::is_regular_file(p)) return std::optional<json>();
  MINFER_TRY(json j, read_json_file(p.string()));
  return std::optional<json>(std::move(j));
}

void parse_normalizer(const json& n, std::optional<bool>& lower, std::optional<bool>& strip) {
  const std::string type = get(n, "type").is_string() ? n["type"].get<std::string>() : "";
  if (type == "Lowercase") lower = true;
  if (type == "StripAccents") strip = true;
  if (type == "BertNormalizer") {
    if (n.contains("lowercase") && n["lowercase"].is_boolean()) lower = n["lowercase"].get<bool>();
    if (n.contains("strip_accents") && n["strip_accents"].is_boolean()) {
      strip = n["strip_accents"].get<bool>();
    }
  }
  if (type == "Sequence") {
    for (const json& c : get(n, "normalizers")) parse_normalizer(c, lower, strip);
  }
}

Status add_special_metadata(const Checkpoint& ck, const json& tok, const std::optional<json>& tc,
                            std::vector<gguf::KeyValue>& kvs);

}  // namespace

Status add_vocab_metadata(const Checkpoint& ck, std::vector<gguf::KeyValue>& kvs) {
  const HParams& h = ck.hparams();
  const fs::path dir(ck.dir());
  auto set = [&](std::string key, Value v) { kvs.push_back({std::move(key), std::move(v)}); };
  if (!fs::is_regular_file(dir / "tokenizer.json")) {
    return make_error(fmt::format(
        "no tokenizer.json in '{}' (only Hugging Face fast tokenizers are supported)", ck.dir()));
  }
  MINFER_TRY(const json tok, read_json_file((dir / "tokenizer.json").string()));
  MINFER_TRY(std::optional<json> tc, read_optional_json(dir / "tokenizer_config.json"));
  if (!tok.is_object()) return make_error("tokenizer.json is not a JSON object");
  if (tc && !tc->is_object()) return make_error("tokenizer_config.json is not a JSON object");

  // LlamaModel.set_vocab writes the tokenizer_config's add_prefix_space first.
  if (h.arch == Arch::kLlama && tc && get(*tc, "add_prefix_space").is_boolean()) {
    set("tokenizer.ggml.add_space_prefix", Value::boolean((*tc)["add_prefix_space"].get<bool>()));
  }

  if (h.arch == Arch::kBert) {
    // BertModel.set_vocab: the token-type count, then the WordPiece vocabulary.
    set("tokenizer.ggml.token_type_count", Value::u32(h.n_token_types));
    auto wp = wordpiece_vocab(tok, h.n_vocab);
    if (!wp.ok()) return wp.error();
    set("tokenizer.ggml.model", Value::string("bert"));
    set("tokenizer.ggml.pre", Value::string(wp->pre));
    set("tokenizer.ggml.tokens", Value::string_array(wp->tokens));
    set("tokenizer.ggml.token_type", Value::i32_array(wp->types));
    return add_special_metadata(ck, tok, tc, kvs);
  }

  hf_vocab::Options opts{.arch = h.gguf_arch, .vocab_size = h.n_vocab};
  // Only the byte-level BPE path (_set_vocab_gpt2) is written; say so before the
  // pre-tokenizer, which SentencePiece-style tokenizers do not have in this form.
  const json model = get(tok, "model");
  const std::string model_type =
      get(model, "type").is_string() ? model["type"].get<std::string>() : "";
  if (model_type != "BPE" || get(model, "byte_fallback") == json(true)) {
    return make_error(fmt::format(
        "tokenizer.json is a {} tokenizer; only byte-level BPE (Llama 3, Qwen) is supported",
        model_type == "BPE" ? "SentencePiece-style BPE (byte fallback)"
                            : "\"" + model_type + "\""));
  }
  auto pre = hf_vocab::detect_pre(get(tok, "pre_tokenizer"));
  if (!pre.ok()) {
    // detect_pre's message suggests the fixture tool's --pre; convert has no such flag.
    const std::string& m = pre.error().message;
    const size_t steps = m.find("Steps:");
    return make_error(
        "tokenizer.json: a pre-tokenizer minfer convert does not know (it knows those of Llama "
        "3, Qwen2/Qwen3, GPT-2 and SmolLM)" +
        (steps == std::string::npos ? std::string() : ". " + m.substr(steps)));
  }
  opts.pre = *pre;
  // llama.cpp's converter names a pre-tokenizer by hashing its output on a fixed text,
  // and the Llama 3 hash is listed twice; the later entry, "smaug-bpe", wins. Both names
  // mean the same split in llama.cpp (and in minfer's tokenizer).
  if (opts.pre == "llama-bpe") opts.pre = "smaug-bpe";
  auto built = hf_vocab::build_vocab(tok, tc ? &*tc : nullptr, opts);
  if (!built.ok()) {
    return built.error().context(
        fmt::format("tokenizer.json (config.json vocab_size {})", h.n_vocab));
  }
  hf_vocab::Vocab v = std::move(built).value();
  if (v.model != "gpt2") {
    return make_error(fmt::format(
        "tokenizer.json is a {} tokenizer; only byte-level BPE (Llama 3, Qwen) is supported",
        v.model == "llama" ? "SentencePiece-style BPE" : v.model));
  }
  set("tokenizer.ggml.model", Value::string(v.model));
  set("tokenizer.ggml.pre", Value::string(v.pre));
  set("tokenizer.ggml.tokens", Value::string_array(v.tokens));
  set("tokenizer.ggml.token_type", Value::i32_array(v.types));
  if (!v.merges.empty()) set("tokenizer.ggml.merges", Value::string_array(v.merges));
  return add_special_metadata(ck, tok, tc, kvs);
}

namespace {

// SpecialVocab's keys (special ids, add_* flags), the chat template(s) and the normalizer
// flags, after the tokens.
Status add_special_metadata(const Checkpoint& ck, const json& tok, const std::optional<json>& tc,
                            std::vector<gguf::KeyValue>& kvs) {
  const fs::path dir(ck.dir());
  auto set = [&](std::string key, Value v) { kvs.push_back({std::move(key), std::move(v)}); };
  Special s;
  json tc_mut = tc ? *tc : json();
  read_post_processor(tok, tc_mut, tc.has_value() && truthy(*tc), s);
  std::string chat_template;
  json template_list;
  if (tc && truthy(*tc)) {
    json t = get(tc_mut, "chat_template");
    if (!tc_mut.contains("chat_template")) {
      // chat_template.jinja, else chat_template.json, beside the config.
      if (fs::is_regular_file(dir / "chat_template.jinja")) {
        MINFER_TRY(t, read_file((dir / "chat_template.jinja").string()));
      } else {
        MINFER_TRY(auto cj, read_optional_json(dir / "chat_template.json"));
        if (cj) t = get(*cj, "chat_template");
      }
    }
    if (t.is_string()) chat_template = t.get<std::string>();
    if (t.is_array()) template_list = t;
    const json added = get(tok, "added_tokens");
    for (size_t i = 0; i < s.types.size(); ++i) {
      const std::string typ = s.types[i];
      const json add = get(tc_mut, "add_" + typ + "_token");
      if (add.is_boolean()) s.add.setdefault(typ, add.get<bool>());
      json entry = get(tc_mut, typ + "_token");
      if (entry.is_object()) entry = get(entry, "content");
      if (!entry.is_string()) continue;
      for (const json& a : added.is_array() ? added : json::array()) {
        if (get(a, "content") == entry) {
          s.set_id(typ, get(a, "id"));
          break;
        }
      }
    }
  }
  for (const std::string& typ : s.types) s.set_id(typ, get(ck.config(), typ + "_token_id"));

  static const std::map<std::string, std::string> kIdKey = {
      {"bos", "bos_token_id"},       {"eos", "eos_token_id"},     {"unk", "unknown_token_id"},
      {"sep", "seperator_token_id"}, {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
      {"mask", "mask_token_id"},     {"eot", "eot_token_id"},     {"eom", "eom_token_id"},
  };
  for (const auto& [typ, id] : s.ids.items) {
    // gguf-py's GGUFWriter (0.3.36) has no add_cls_token_id: SpecialVocab skips the type.
    if (typ == "cls") continue;
    if (id < 0 || id > UINT32_MAX)
      return make_error(fmt::format("{} token id {} is out of range", typ, id));
    set("tokenizer.ggml." + kIdKey.at(typ), Value::u32(static_cast<uint32_t>(id)));
  }
  for (const auto& [typ, flag] : s.add.items) {
    if (typ == "bos" || typ == "eos" || typ == "sep") {
      set("tokenizer.ggml.add_" + typ + "_token", Value::boolean(flag));
    }
  }
  if (template_list.is_array()) {
    // GGUFWriter.add_chat_template: named templates as tokenizer.chat_template.<name>,
    // their names in tokenizer.chat_templates, the "default" one as the chat template.
    std::vector<std::string> names;
    for (const json& e : template_list) {
      std::string name = get(e, "name").is_string() ? e["name"].get<std::string>() : "";
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      const json t = get(e, "template");
      if (name.empty() || !t.is_string()) continue;
      if (name == "default") {
        chat_template = t.get<std::string>();
      } else {
        names.push_back(name);
        set("tokenizer.chat_template." + name, Value::string(t.get<std::string>()));
      }
    }
    if (!names.empty()) set("tokenizer.chat_templates", Value::string_array(names));
  }
  if (!chat_template.empty()) set("tokenizer.chat_template", Value::string(chat_template));
  std::optional<bool> lower, strip;
  if (tok.contains("normalizer") && truthy(tok["normalizer"])) {
    parse_normalizer(tok["normalizer"], lower, strip);
  }
  if (lower) set("tokenizer.ggml.normalizer.lowercase", Value::boolean(*lower));
  if (strip) set("tokenizer.ggml.normalizer.strip_accents", Value::boolean(*strip));
  return Ok{};
}

}  // namespace

}  // namespace minfer::convert
