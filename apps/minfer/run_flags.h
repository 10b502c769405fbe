// Stage 18 (CLI): the flags of a model run — single-shot generation and the
// conversation mode take the same table (llama.cpp's spellings next to minfer's), so a
// command line means the same in both modes. docs/USAGE.md lists every flag.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "args.h"
#include "chat/renderer.h"
#include "core/result.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "engine_flags.h"
#include "grammar/grammar.h"
#include "sample/sampler_config.h"

namespace minfer::cli {

enum class RunMode : uint8_t { kAuto, kSingleShot, kConversation };

struct RunArgs {
  KvFlags kv;
  std::vector<std::string> positionals;
  std::string model_opt;                  // -m
  std::optional<std::string> prompt;      // -p (or the second positional)
  std::string prompt_file;                // -f
  std::string system;                     // -sys
  std::string session;                    // --session
  std::string template_file;              // --chat-template-file
  std::string chat_template;              // --chat-template NAME|JINJA
  std::string chat_template_kwargs;       // --chat-template-kwargs JSON object
  bool reasoning_split = true;            // --reasoning-format deepseek (none: false)
  int32_t reasoning_budget = -1;          // --reasoning-budget
  std::vector<std::string> stop;          // --stop, -r
  std::vector<std::string> dry_breakers;  // --dry-sequence-breaker (tokenized after load)
  bool dry_breakers_given = false;
  sample::SamplerConfig sampler;
  bool seed_random = false;         // -s -1
  int32_t repeat_last_n = 64;       // -1: the context size
  int32_t dry_penalty_last_n = -2;  // -2: unset; -1: the context size
  int32_t n_predict = 512;
  std::optional<uint32_t> n_ctx;           // -c; 0: the model's context
  int32_t n_threads = 0;                   // <= 0: every core
  std::optional<int32_t> n_threads_batch;  // -tb: accepted; a notice when it differs from -t
  int32_t n_batch = 0, n_ubatch = 0;       // 0: the whole prompt in one forward
  bool greedy = false, no_template = false, ignore_eos = false, verbose = false, color = false,
       mlock = false;
  bool context_shift = false;  // --context-shift / --no-context-shift
  int32_t keep = 0;            // --keep: llama.cpp's n_keep (-1: the whole prompt)
  bool keep_given = false;
  bool log_disable = false;  // --log-disable: log_info prints nothing (errors still print)
  RunMode mode = RunMode::kAuto;
  bool single_turn = false, multiline = false;
  bool escape = false;               // -e: \n \t ... in the prompt, system prompt and stop strings
  std::vector<std::string> notices;  // accepted flags this build cannot honour
  std::string dump_dot, dump_graph_json, dump_logits, dump_json;
  std::string dump_trace;  // --dump-trace: Chrome trace-event JSON of the run's per-op profile
  // --grammar, --grammar-file, --json-schema (-j), --json-schema-file: at most one kind
  // (`constraint_flag` is the one given; a second kind is a usage error at parse time).
  std::string constraint_flag, constraint_value;
  // Speculative decoding (single-shot runs): --spec-ngram, --draft-max, --draft-min,
  // --draft-p-min into `spec` (its draft context is opened by the run), -md's path, -td's
  // threads of the draft model (0: -t's; resolved by prepare_run).
  engine::SpecOptions spec;
  std::string model_draft;
  int32_t threads_draft = 0;
  // Compiled by prepare_run (before the model loads); null: unconstrained.
  std::shared_ptr<grammar::StateTable> grammar_table;
};

// The output constraint of a run (compiled grammar → one constraint per run or reply)
// for GenerateOptions / ConversationOptions; empty when no grammar flag was given.
std::function<std::unique_ptr<engine::TokenConstraint>()> constraint_factory(
    const RunArgs& a, const tokenizer::Tokenizer& tok);

void add_run_flags(ArgParser& p, RunArgs& a);

// --spec-ngram, -md/--model-draft, -td/--threads-draft, --draft-max, --draft-min,
// --draft-p-min: the one registration of the speculative-decoding flags, shared by
// single-shot runs and serve.
void add_spec_flags(ArgParser& p, engine::SpecOptions& spec, std::string& model_draft,
                    int32_t& threads_draft);
// Not both drafters; a minimum no draft could reach. Error: which, with the flags' names.
Status check_spec_flags(const engine::SpecOptions& spec, const std::string& model_draft,
                        int32_t threads_draft);

// `minfer MODEL -cnv [flags]`: the conversation mode (cmd_chat.cpp); run_generate
// hands over the parsed flags.
int run_chat(RunArgs& a);

// The help text of `minfer MODEL [PROMPT] [flags]` (also printed by `minfer --help`).
std::string run_help();

// llama.cpp's -e: \n \r \t \' \" \\ and \xHH become the bytes they name; any other
// backslash stays as typed.
std::string process_escapes(const std::string& text);

// The thread count to use: <= 0 → every core; above the cores → capped, with a
// notice on stderr.
int32_t resolve_threads(int32_t requested);

// Both modes, before the model is loaded: --greedy, -s -1 (the seed drawn and printed),
// -t, the sampler's own checks, output paths writable (--session, --dump-*), the KV and
// numerics flags, the template flags, and the notices of accepted-but-ignored flags —
// all on stderr, each once. Every usage error that needs no model is found here.
Status prepare_run(RunArgs& a);

// --chat-template (a known name or Jinja text), not both template flags, and
// --chat-template-kwargs a JSON object: what needs no model.
Status check_template_flags(const RunArgs& a);

// "Loading model: ..." and Engine::open (via open_engine), then --mlock.
// n_threads > 0 replaces -t's (the draft model's -td).
Result<std::unique_ptr<engine::Engine>> load_engine(const RunArgs& a, const std::string& model_arg,
                                                    int32_t n_threads = 0);

// --chat-template NAME|JINJA, --chat-template-file, else the model's template (ChatML
// with a notice when the GGUF has none).
Result<chat::RendererChoice> choose_renderer(const RunArgs& a, const tokenizer::Tokenizer& tok);

// The KV size of a run. -c N: N (0: the model's context; above it: capped, with a
// notice); no -c: 4096, grown to the prompt plus -n, capped by the model. A prompt
// that leaves no position to generate into is an Error naming both numbers.
Result<uint32_t> run_context(const RunArgs& a, const engine::Context& e, uint32_t n_prompt);

// What needs the model or the context: -1 windows (--repeat-last-n,
// --dry-penalty-last-n) become n_ctx, DRY breakers are tokenized, and the config is
// checked against the vocabulary.
Status finish_sampler(RunArgs& a, const engine::Context& e, uint32_t n_ctx);

// A thinking block's text on stderr (dimmed when stderr is a terminal), so stdout
// carries the answer alone. end() closes a block that was printed (the dim off, a
// newline) — before the answer's first bytes and at the end of a reply.
class ThoughtPrinter {
 public:
  ThoughtPrinter();
  void print(std::string_view text);
  void end();

 private:
  bool tty_;
  bool open_ = false;
};

}  // namespace minfer::cli
