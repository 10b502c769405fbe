// Stage 18 (CLI): dispatch on the first argument to a subcommand; no engine logic
// lives here. Errors become "minfer: error: ..." and exit code 1.
#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"

namespace {

constexpr const char* kUsage =
    "minfer — run LLMs from GGUF files\n"
    "\n"
    "usage:\n"
    "  minfer MODEL [PROMPT] [flags]                     generate (minfer MODEL --help for flags)\n"
    "  minfer info [MODEL] [--json]                      metadata, tensors, totals\n"
    "  minfer tokenize MODEL [TEXT] [--file PATH] [--ids] [--no-special] [--parse-special]\n"
    "  minfer bench MODEL [-p N] [-n N] [-r N] [-t N] [-o md|csv|json] [--n-ctx N]\n"
    "  minfer MODEL --cnv [--system TEXT] [--session FILE] [-n N] [sampling flags]   chat\n"
    "  minfer template (MODEL | --template FILE) --messages FILE.json [--add-generation-prompt]\n"
    "                  [--bos TEXT] [--eos TEXT]        print a chat template's exact render\n"
    "  minfer serve MODEL [--host H] [--port N] [--slots N] [--n-ctx N] [--api-key K] [-t N]\n"
    "                                                    OpenAI-compatible HTTP server\n"
    "  minfer --help | --version\n"
    "\n"
    "MODEL is a path, or a file name in the model cache ($MINFER_MODEL_DIR,\n"
    "default ~/.cache/minfer/models); `info` without MODEL uses the default model\n"
    "(SmolLM2-135M-Instruct Q4_1, fetched by scripts/setup.sh).\n";

}  // namespace

namespace minfer::cli {
int fail(const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "minfer: error: {}\n", message);
  return 1;
}

int dispatch(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::FILE* out = args.empty() ? stderr : stdout;
    std::fputs(kUsage, out);
    std::fputc('\n', out);
    std::fputs(generate_help().c_str(), out);
    return args.empty() ? 1 : 0;
  }
  if (args[0] == "-V" || args[0] == "--version") {
    fmt::print("minfer v{}\n", MINFER_VERSION);
    return 0;
  }
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "info") return run_info(rest);
  if (cmd == "tokenize") return run_tokenize(rest);
  if (cmd == "template") return run_template(rest);
  if (cmd == "bench") return run_bench(rest);
  if (cmd == "serve") return run_serve(rest);
  return run_generate(args);  // minfer MODEL [PROMPT] [flags]
}

}  // namespace minfer::cli
