// Stage 18 (CLI): `minfer tokenize MODEL [TEXT] [--file PATH] [--ids] [--no-special]
// [--parse-special]`. The text (argument, file bytes or stdin) is used exactly as
// given; `--ids` prints the ids on one line separated by single spaces.
#include <fmt/core.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include "args.h"
#include "commands.h"
#include "files.h"
#include "gguf/gguf.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

namespace minfer::cli {
namespace {

// Printable form of a token's bytes for the per-token listing: valid UTF-8 is kept,
// control bytes and invalid sequences are escaped as \xNN.
std::string escape_piece(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

int run_tokenize(const std::vector<std::string>& args) {
  ArgParser p("minfer tokenize MODEL [TEXT] [flags]");
  std::string model_opt, file;
  bool ids_only = false, no_special = false, parse_special = false;
  p.string_opt("-m,--model", "PATH", "GGUF file (then the only positional is TEXT)", model_opt);
  std::optional<std::string> prompt_opt;
  p.option("-p,--prompt", "TEXT", "the text (instead of the positional; llama-tokenize's -p)",
           [&](const std::string& v) -> Status {
             prompt_opt = v;
             return Ok{};
           });
  p.string_opt("-f,--file", "PATH", "read the text from this file (bytes used exactly)", file);
  p.flag("--ids", "print only the ids, on one line, separated by spaces", [&] { ids_only = true; });
  p.flag("--no-special", "add no BOS/EOS tokens", [&] { no_special = true; });
  p.flag("--parse-special", "parse special-token text (e.g. <|im_start|>) as those tokens",
         [&] { parse_special = true; });
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  const std::vector<std::string>& positionals = parsed.positionals;

  std::string model_arg = model_opt;
  std::optional<std::string> text;
  size_t next = 0;
  if (model_arg.empty()) {
    if (positionals.empty()) return fail("tokenize: no model given (minfer tokenize MODEL TEXT)");
    model_arg = positionals[next++];
  }
  if (next < positionals.size()) text = positionals[next++];
  if (next < positionals.size()) return fail("tokenize: too many arguments");
  if (prompt_opt) {
    if (text) return fail("tokenize: give TEXT or -p, not both");
    text = std::move(prompt_opt);
  }
  if (text && !file.empty()) return fail("tokenize: give TEXT or --file, not both");
  if (!file.empty()) {
    auto content = read_input_file(file);
    if (!content) return fail(content.error().message);
    text = std::move(*content);
  }
  if (!text) {
    text = std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }

  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  if (auto st = check_model_file(*path); !st.ok()) return fail(st.error().message);
  auto model = gguf::Model::open(*path);
  if (!model) return fail(model.error().message);
  auto tok = tokenizer::Tokenizer::from_gguf(*model);
  if (!tok) return fail(tok.error().message);
  auto ids = (*tok)->encode(*text, {.add_special = !no_special, .parse_special = parse_special});
  if (!ids) return fail(ids.error().message);

  std::string out;
  if (ids_only) {
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i) out += ' ';
      out += std::to_string((*ids)[i]);
    }
    out += '\n';
  } else {
    for (auto id : *ids) {
      out += fmt::format("{:>7} -> '{}'\n", id, escape_piece((*tok)->token_to_bytes(id, true)));
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace minfer::cli
