// Stage 18 (CLI): one function per subcommand. Each takes the arguments after the
// subcommand name and returns the process exit code; errors go to stderr.
#pragma once

#include <string>
#include <vector>

namespace minfer::cli {

// The whole command line after the program name: picks the subcommand and returns
// the process exit code (0 ok, 1 error). Usage errors and failures are reported on
// stderr as "minfer: error: ...". main() wraps it to turn any escaped exception into
// the same error exit.
int dispatch(const std::vector<std::string>& args);

int run_info(const std::vector<std::string>& args);
int run_tokenize(const std::vector<std::string>& args);
// `minfer embed MODEL [TEXT...]`: llama-embedding's inputs and output formats.
int run_embed(const std::vector<std::string>& args);
// `minfer template (MODEL | --template FILE) --messages FILE.json`: the exact render.
int run_template(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);  // `minfer bench MODEL [flags]`
int run_serve(const std::vector<std::string>& args);  // `minfer serve MODEL [flags]`
int run_viz(const std::vector<std::string>& args);    // `minfer viz MODEL [--port 8081]`
// `minfer perplexity MODEL -f TEXT`: llama-perplexity's method and output.
int run_perplexity(const std::vector<std::string>& args);
// `minfer quantize IN.gguf OUT.gguf TYPE`: llama-quantize's type mix and bytes.
int run_quantize(const std::vector<std::string>& args);
// `minfer split IN.gguf OUT_PREFIX` / `minfer merge FIRST_PART OUT.gguf`: llama-gguf-split.
int run_split(const std::vector<std::string>& args);
int run_merge(const std::vector<std::string>& args);
// `minfer convert HF_DIR OUT.gguf [--outtype T]`: convert_hf_to_gguf.py's bytes.
int run_convert(const std::vector<std::string>& args);
// The model cache: `minfer list`, `minfer rm NAME`, `minfer pull hf:REPO[:QUANT]`.
int run_list(const std::vector<std::string>& args);
int run_rm(const std::vector<std::string>& args);
int run_pull(const std::vector<std::string>& args);
// `minfer MODEL [PROMPT] [flags]`: the default when the first argument is no subcommand.
// `ollama_run`: `minfer run MODEL [PROMPT]` as Ollama users type it — without a prompt
// (no PROMPT, -p or -f) and with a terminal on stdin it is the conversation (-cnv).
int run_generate(const std::vector<std::string>& args, bool ollama_run = false);
std::string generate_help();  // the generation flags, for `minfer --help`

// Shared error path: "minfer: error: <message>" on stderr, exit code 1.
int fail(const std::string& message);

}  // namespace minfer::cli
