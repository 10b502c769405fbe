// Tool (fixtures): `minfer-hf-vocab INPUT -o OUT.gguf [--arch NAME] [--pre NAME] ...`
// INPUT is a tokenizer.json or a folder holding one; tokenizer_config.json beside it is
// read unless --config names another or --no-config is given. Writes a vocabulary-only
// GGUF (no tensors) whose tokenizer.ggml.* metadata is what convert_hf_to_gguf.py writes.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <map>

#include "hf_vocab/hf_vocab.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

minfer::Result<json> read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return minfer::make_error(fmt::format("cannot open {}", path.string()));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    return minfer::make_error(fmt::format("{}: {}", path.string(), e.what()));
  }
}

int fail(const minfer::Error& e) {
  fmt::print(stderr, "minfer-hf-vocab: {}\n", e.message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Hugging Face tokenizer.json → vocabulary-only GGUF", "minfer-hf-vocab"};
  std::string input, output, config_path;
  bool no_config = false, quiet = false;
  minfer::hf_vocab::Options opts;
  app.add_option("input", input, "tokenizer.json, or a folder holding it")->required();
  app.add_option("-o,--output", output, "GGUF file to write")->required();
  app.add_option("--config", config_path, "tokenizer_config.json (default: beside the input)");
  app.add_flag("--no-config", no_config, "ignore tokenizer_config.json");
  app.add_option("--arch", opts.arch, "general.architecture")->capture_default_str();
  app.add_option("--name", opts.name, "general.name");
  app.add_option("--pre", opts.pre, "tokenizer.ggml.pre (default: detected)");
  app.add_option("--vocab-size", opts.vocab_size,
                 "pad the token list to this many ids (the model's embedding rows)");
  app.add_flag("-q,--quiet", quiet, "print no summary");
  CLI11_PARSE(app, argc, argv);

  fs::path tok_path = input;
  if (fs::is_directory(tok_path)) tok_path /= "tokenizer.json";
  if (config_path.empty() && !no_config) {
    const fs::path beside = tok_path.parent_path() / "tokenizer_config.json";
    if (fs::exists(beside)) config_path = beside.string();
  }
  auto tok = read_json(tok_path);
  if (!tok) return fail(tok.error());
  std::optional<json> config;
  if (!config_path.empty() && !no_config) {
    auto c = read_json(config_path);
    if (!c) return fail(c.error());
    config = std::move(c).value();
  }
  auto vocab = minfer::hf_vocab::build_vocab(*tok, config ? &*config : nullptr, opts);
  if (!vocab) return fail(vocab.error().context(tok_path.string()));
  auto st = minfer::hf_vocab::to_writer(*vocab, opts).write(output);
  if (!st) return fail(st.error());

  if (!quiet) {
    std::map<int32_t, size_t> by_type;
    for (int32_t t : vocab->types) ++by_type[t];
    std::string types;
    for (const auto& [t, n] : by_type) types += fmt::format(" {}:{}", t, n);
    auto id = [](const std::optional<int32_t>& v) { return v ? std::to_string(*v) : "-"; };
    fmt::print(stderr,
               "{}: model={} pre={} tokens={} types{{{} }} merges={} bos={} eos={} unk={} "
               "pad={} chat_template={}\n",
               output, vocab->model, vocab->pre, vocab->tokens.size(), types, vocab->merges.size(),
               id(vocab->special.bos), id(vocab->special.eos), id(vocab->special.unk),
               id(vocab->special.pad), vocab->chat_template.empty() ? "no" : "yes");
  }
  return 0;
}
