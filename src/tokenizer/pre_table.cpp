// Stage 4 (text → ids): `tokenizer.ggml.pre` names → regex lists and BPE flags.
// Invariants: each entry's regexes, aliases and flags are those llama.cpp uses for the
// name (src/llama-vocab.cpp, llm_tokenizer_bpe and llama_vocab::impl::load); the
// regexes themselves come from each model's tokenizer.json pre_tokenizer, with
// llama.cpp's adaptations ((?i:..) spelled out as [sS] etc.). Non-ASCII characters
// are written as \x{..} so the code points are visible and cannot be re-normalized.
//
// Not offered (a GGUF naming them gets the unknown-pre-tokenizer error): kimi-k2 and
// afmoe (llama.cpp runs hand-written splitters there), gemma4 / sarvam-moe /
// whitespace (SentencePiece-style BPE sessions), youtu and tiny_aya (they rely on
// \p{Lu}/\p{Ll} or \b, which llama.cpp's collapsed std::regex does not evaluate as
// Unicode does), superbpe (empty matches), chameleon, hybriddna.
#include <array>

#include "tokenizer/pretokenizer.h"

namespace minfer::tokenizer {

namespace {

// ' ?\p{L}+' family, GPT-2 (openai/gpt-2 encoder.py).
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr const char* kContractions =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))re";
// Llama 3 / tiktoken cl100k.
constexpr const char* kLlama3Tail =
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Qwen2: like Llama 3 with single digits.
constexpr const char* kQwen2Tail =
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen35Tail =
    R"re(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kJais2Tail =
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re";
constexpr const char* kSeedCoderTail =
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kExaoneMoeTail =
    R"re(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* kMiniCpm5Tail =
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kBailing =
    R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* kUfakzeka =
    R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Mistral tekken / GPT-4o: upper*lower+ | upper+lower* written with lookaheads.
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGraniteEmbMulti =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// BLOOM / Poro / GPT-3 Finnish: split before punctuation (the '(' '|' ')' are literal
// members of the class, as in the original).
constexpr const char* kBloom =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re";
// DeepSeek LLM: Latin/Greek/Cyrillic/... letters, ASCII and full-width punctuation, CJK.
constexpr const char* kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
constexpr const char* kDeepseekPunct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
constexpr const char* kDeepseekCjk = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
// DeepSeek V3 family.
constexpr const char* kDeepseek3Cjk =
    R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr const char* kDeepseek3Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kSpark25Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re";

std::string cat(const char* a, const char* b) {
  return std::string(a) + b;
}

struct Entry {
  std::vector<std::string> names;  // first is canonical
  std::vector<std::string> regexes;
  bool ignore_merges = false;
  bool default_add_bos = false;
  bool no_bos = false;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = [] {
    const std::string llama3 = cat(kContractions, kLlama3Tail);
    const std::string qwen2 = cat(kContractions, kQwen2Tail);
    std::vector<Entry> e;
    e.push_back(
        {.names = {"default"},
         .regexes = {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}});
    e.push_back({.names = {"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano"},
                 .regexes = {llama3},
                 .ignore_merges = true,
                 .default_add_bos = true});
    e.push_back({.names = {"dbrx", "smaug-bpe"}, .regexes = {llama3}});
    e.push_back({.names = {"jais-2"}, .regexes = {cat(kContractions, kJais2Tail)}});
    e.push_back({.names = {"deepseek-llm"},
                 .regexes = {"[\r\n]", kDeepseekLetters, kDeepseekPunct, R"re(\s+$)re",
                             kDeepseekCjk, R"re(\p{N}+)re"}});
    e.push_back({.names = {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
                 .regexes = {R"re(\p{N}{1,3})re", kDeepseek3Cjk, kDeepseek3Main}});
    e.push_back({.names = {"spark2_5"},
                 .regexes = {R"re(\p{N}{1,3})re", kDeepseek3Cjk, kSpark25Main, R"re(\p{N})re"}});
    e.push_back({.names = {"deepseek-coder"},
                 .regexes = {"[\r\n]", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepseekCjk,
                             R"re(\p{N})re"}});
    e.push_back({.names = {"falcon"},
                 .regexes = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}});
    e.push_back({.names = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                           "minerva-7b", "mellum2"},
                 .regexes = {R"re(\p{N})re", kGpt2}});
    e.push_back(
        {.names = {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                   "a.x-4.0", "mellum", "modern-bert", "exaone4", "jina-v1-en", "jina-v2-code",
                   "roberta-bpe", "mpt", "olmo", "jais", "trillion", "granite-docling"},
         .regexes = {kGpt2}});
    e.push_back({.names = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2",
                           "hunyuan", "solar-open"},
                 .regexes = {qwen2}});
    e.push_back({.names = {"qwen35"}, .regexes = {cat(kContractions, kQwen35Tail)}});
    e.push_back({.names = {"poro-chat", "bloom", "gpt3-finnish"}, .regexes = {kBloom}});
    e.push_back({.names = {"viking"}, .regexes = {kBloom, R"re(\p{N})re"}});
    e.push_back({.names = {"chatglm-bpe"}, .regexes = {llama3}, .no_bos = true});
    e.push_back(
        {.names = {"glm4", "glm5"}, .regexes = {llama3}, .ignore_merges = true, .no_bos = true});
    e.push_back({.names = {"tekken"},
                 .regexes = {kTekken},
                 .ignore_merges = true,
                 .default_add_bos = true});
    e.push_back(
        {.names = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, .regexes = {kGpt4o}});
    e.push_back({.names = {"granite-embed-multi-97m"},
                 .regexes = {kGraniteEmbMulti},
                 .ignore_merges = true});
    e.push_back({.names = {"bailingmoe", "bailingmoe2", "llada-moe"}, .regexes = {kBailing}});
    e.push_back({.names = {"seed-coder"}, .regexes = {cat(kContractions, kSeedCoderTail)}});
    e.push_back({.names = {"ufakzeka"}, .regexes = {kUfakzeka}});
    e.push_back({.names = {"grok-2"}, .regexes = {qwen2}});
    e.push_back({.names = {"laguna"}, .regexes = {R"re([^\n]+|[\n]+)re", qwen2}});
    e.push_back({.names = {"exaone-moe"}, .regexes = {cat(kContractions, kExaoneMoeTail)}});
    e.push_back({.names = {"minicpm5"},
                 .regexes = {R"re(\p{N}{1,3})re", cat(kContractions, kMiniCpm5Tail)},
                 .ignore_merges = true});
    return e;
  }();
  return t;
}

}  // namespace

Result<PreTokenizerSpec> find_pre_tokenizer(std::string_view name) {
  const std::string_view key = name.empty() ? std::string_view("default") : name;
  for (const auto& e : table()) {
    for (const auto& n : e.names) {
      if (n == key) {
        return PreTokenizerSpec{.name = e.names.front(),
                                .regexes = e.regexes,
                                .ignore_merges = e.ignore_merges,
                                .default_add_bos = e.default_add_bos,
                                .no_bos = e.no_bos};
      }
    }
  }
  return make_error("unknown pre-tokenizer type '" + std::string(name) +
                    "' (tokenizer.ggml.pre); minfer knows " +
                    std::to_string(known_pre_tokenizers().size()) +
                    " names, e.g. gpt-2, "
                    "llama-bpe, qwen2, deepseek-coder");
}

std::vector<std::string> known_pre_tokenizers() {
  std::vector<std::string> out;
  for (const auto& e : table()) out.insert(out.end(), e.names.begin(), e.names.end());
  return out;
}

}  // namespace minfer::tokenizer
