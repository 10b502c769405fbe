// Stage 18 (CLI): the run flag table (run_flags.h). Ranges are checked here, at parse
// time, with the flag's name in the error; the sampler's own validate() then checks
// the combinations.
#include "run_flags.h"

#include <fmt/core.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "core/log.h"
#include "files.h"
#include "grammar/json_schema.h"
#include "model_path.h"
#include "server/constraint.h"

namespace minfer::cli {
namespace {

constexpr int64_t kI32Max = INT32_MAX;
constexpr int32_t kDefaultPrefillChunk = 512;  // -b / -ub unset

Status set_int(const std::string& v, const char* what, int64_t lo, int64_t hi, int32_t& target) {
  MINFER_TRY(const int64_t n, parse_int(v, what, lo, hi));
  target = static_cast<int32_t>(n);
  return Ok{};
}

// llama.cpp's --logit-bias form: TOKEN_ID followed by + or - and the bias
// ("15043+1", "15043-0.5", "2-inf"). An infinite bias becomes ±kMaxLogitBias (the
// sampler's range), which bans or forces the token just as well; said on stderr.
Status add_logit_bias(const std::string& v, RunArgs& a) {
  const size_t sign = v.find_first_of("+-", 1);
  if (sign == std::string::npos) {
    return make_error(fmt::format("--logit-bias: '{}' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS", v));
  }
  MINFER_TRY(const int64_t id, parse_int(v.substr(0, sign), "--logit-bias token id", 0, kI32Max));
  std::string num = v.substr(sign);
  float bias = 0.0f;
  if (num == "-inf" || num == "+inf") {
    bias = num[0] == '-' ? -sample::kMaxLogitBias : sample::kMaxLogitBias;
    a.notices.push_back(fmt::format("--logit-bias {}: an infinite bias is applied as {}", v, bias));
  } else {
    MINFER_TRY(
        bias, parse_float(num, "--logit-bias bias", -sample::kMaxLogitBias, sample::kMaxLogitBias));
  }
  a.sampler.logit_bias.push_back({.id = static_cast<sample::TokenId>(id), .bias = bias});
  return Ok{};
}

// --grammar and its siblings: one kind per run; the same flag again replaces the value.
Status set_constraint(RunArgs& a, const char* flag, const std::string& v) {
  if (!a.constraint_flag.empty() && a.constraint_flag != flag) {
    return make_error(fmt::format(
        "{} and {} cannot be combined: give one of --grammar, --grammar-file, --json-schema "
        "(-j) and --json-schema-file",
        a.constraint_flag, flag));
  }
  a.constraint_flag = flag;
  a.constraint_value = v;
  return Ok{};
}

// The GBNF text of the constraint flag (files read, a schema converted), compiled.
Status compile_constraint(RunArgs& a) {
  if (a.constraint_flag.empty()) return Ok{};
  const std::string& flag = a.constraint_flag;
  std::string text = a.constraint_value;
  if (flag == "--grammar-file" || flag == "--json-schema-file") {
    auto f = read_input_file(text);
    if (!f) return f.error().context(flag);
    text = std::move(*f);
  }
  std::string gbnf;
  if (flag == "--json-schema" || flag == "--json-schema-file") {
    const std::string where =
        flag == "--json-schema" ? flag : flag + " '" + a.constraint_value + "'";
    auto g = grammar::json_schema_to_gbnf(text);
    if (!g) return make_error(fmt::format("{}: {}", where, g.error().message));
    gbnf = std::move(*g);
  } else {
    gbnf = std::move(text);
  }
  const std::string where = flag == "--grammar" ? flag : flag + " '" + a.constraint_value + "'";
  auto g = grammar::Grammar::parse(gbnf);
  if (!g) return make_error(fmt::format("{}: {}", where, g.error().message));
  auto table = grammar::StateTable::create(*g);
  if (!table) return make_error(fmt::format("{}: {}", where, table.error().message));
  a.grammar_table = std::move(*table);
  return Ok{};
}

}  // namespace

std::function<std::unique_ptr<engine::TokenConstraint>()> constraint_factory(
    const RunArgs& a, const tokenizer::Tokenizer& tok) {
  if (!a.grammar_table) return {};
  std::shared_ptr<const grammar::TokenVocab> vocab = grammar::TokenVocab::build(tok);
  return [table = a.grammar_table, vocab] { return server::make_grammar_constraint(table, vocab); };
}

int32_t resolve_threads(int32_t requested) {
  const auto cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (requested <= 0) return cores;
  if (requested > cores) {
    log_info("notice: -t {} capped at {} (the CPU cores)", requested, cores);
    return cores;
  }
  return requested;
}

void add_spec_flags(ArgParser& p, engine::SpecOptions& spec, std::string& model_draft,
                    int32_t& threads_draft) {
  p.option(
      "--spec-ngram", "N",
      "draft from the history: the last N tokens matched earlier in the prompt and the\n"
      "output, the tokens that followed proposed (prompt lookup; 0: off)",
      [&spec](const std::string& v) { return set_int(v, "--spec-ngram", 0, 1024, spec.ngram); });
  p.string_opt("-md,--model-draft,--spec-draft-model", "PATH",
               "draft model (the target's vocabulary); its greedy tokens are proposed",
               model_draft);
  p.option("-td,--threads-draft,--spec-draft-threads", "N",
           "CPU threads of the -md draft model (default: the same as -t; capped at the cores)",
           [&threads_draft](const std::string& v) {
             return set_int(v, "-td", -1, kI32Max, threads_draft);
           });
  p.option(
      "--draft-max,--draft,--draft-n,--spec-draft-n-max", "N",
      fmt::format("tokens drafted at most per verifying forward ({})", spec.n_max),
      [&spec](const std::string& v) { return set_int(v, "--draft-max", 1, 1024, spec.n_max); });
  p.option(
      "--draft-min,--draft-n-min,--spec-draft-n-min", "N",
      fmt::format("a shorter draft is not verified ({})", spec.n_min),
      [&spec](const std::string& v) { return set_int(v, "--draft-min", 0, 1024, spec.n_min); });
  p.float_opt("--draft-p-min,--spec-draft-p-min", "P",
              fmt::format("-md: the draft ends at a token its model gives less probability ({})",
                          spec.p_min),
              spec.p_min, 0.0f, 1.0f);
}

Status check_spec_flags(const engine::SpecOptions& spec, const std::string& model_draft,
                        int32_t threads_draft) {
  if (spec.ngram > 0 && !model_draft.empty()) {
    return make_error("give --spec-ngram or -md (--model-draft), not both");
  }
  if (threads_draft != 0 && model_draft.empty()) {
    return make_error(
        fmt::format("-td {}: there is no draft model (give -md PATH)", threads_draft));
  }
  if (spec.n_min > spec.n_max) {
    return make_error(
        fmt::format("--draft-min {} is above --draft-max {}: no draft would be verified",
                    spec.n_min, spec.n_max));
  }
  return Ok{};
}

void add_run_flags(ArgParser& p, RunArgs& a) {
  sample::SamplerConfig& sc = a.sampler;

  p.section("model and prompt");
  p.string_opt("-m,--model", "PATH", "GGUF file (then the only positional is the prompt)",
               a.model_opt);
  p.option("-p,--prompt", "TEXT", "the prompt (default: the second positional, else stdin)",
           [&a](const std::string& v) -> Status {
             a.prompt = v;
             return Ok{};
           });
  p.string_opt("-f,--file", "PATH", "read the prompt from this file (one trailing newline dropped)",
               a.prompt_file);
  p.string_opt("-sys,--system-prompt,--system", "TEXT", "system message of the rendered prompt",
               a.system);
  p.flag("-e,--escape",
         "process \\n \\r \\t \\' \\\" \\\\ \\xHH in the prompt, the system prompt and stop\n"
         "strings (llama.cpp's default; here off: text is used byte for byte)",
         [&a] { a.escape = true; });
  p.flag("--no-escape", "use the prompt as typed (the default)", [&a] { a.escape = false; });
  p.flag("--no-template", "use the prompt as raw text, not rendered with the chat template",
         [&a] { a.no_template = true; });
  p.string_opt("--chat-template", "NAME|JINJA",
               "chat template: the name chatml, or a Jinja template text (default: the model's)",
               a.chat_template);
  p.string_opt("--chat-template-file", "PATH", "Jinja chat template file instead of the model's",
               a.template_file);
  p.string_opt("--chat-template-kwargs", "JSON",
               "extra template variables, a JSON object (llama.cpp's flag), e.g.\n"
               "'{\"enable_thinking\": false}' for Qwen3's no-thinking turns",
               a.chat_template_kwargs);
  add_reasoning_flags(
      p, a.reasoning_split, a.reasoning_budget,
      "a thinking template's <think> block: deepseek (default) prints it on stderr\n"
      "(dimmed on a terminal), the answer on stdout; none prints it all on stdout",
      "reasoning tokens at most, then the block is closed and the answer follows "
      "(-1: no\nlimit; 0: no thinking)");
  p.flag("--jinja", "accepted for llama.cpp compatibility: templates are always Jinja", [] {});

  p.section("conversation");
  p.flag("-cnv,--conversation,--cnv,-i,--interactive", "interactive conversation mode",
         [&a] { a.mode = RunMode::kConversation; });
  p.flag("-no-cnv,--no-conversation", "single-shot generation (the default)",
         [&a] { a.mode = RunMode::kSingleShot; });
  p.flag("-st,--single-turn", "conversation mode for one turn, then exit", [&a] {
    a.mode = RunMode::kConversation;
    a.single_turn = true;
  });
  p.flag("-mli,--multiline-input",
         "conversation input: lines join until one ends with '/' (default: a line ending\n"
         "with '\\' continues on the next)",
         [&a] { a.multiline = true; });
  p.string_opt("--session,--prompt-cache", "PATH",
               "conversation: resume from / save to this file after every turn", a.session);

  p.section("generation");
  p.option("-n,--n-predict,--predict", "N",
           "tokens to generate at most; -1: until the context is full (512)",
           [&a](const std::string& v) { return set_int(v, "-n", -1, kI32Max, a.n_predict); });
  p.option("-c,--ctx-size,--n-ctx", "N",
           "context size (KV cells); 0: the model's context (default 4096, grown to fit\n"
           "the prompt)",
           [&a](const std::string& v) -> Status {
             MINFER_TRY(const int64_t n, parse_int(v, "-c", 0, UINT32_MAX));
             a.n_ctx = static_cast<uint32_t>(n);
             return Ok{};
           });
  p.option("-b,--batch-size", "N",
           "prompt tokens per prefill forward (default: 512, llama.cpp's -ub)",
           [&a](const std::string& v) { return set_int(v, "-b", 1, kI32Max, a.n_batch); });
  p.option("-ub,--ubatch-size", "N", "same as -b (the smaller of the two is used)",
           [&a](const std::string& v) { return set_int(v, "-ub", 1, kI32Max, a.n_ubatch); });
  p.option("-t,--threads", "N", "CPU threads; 0 or -1: every core (the default)",
           [&a](const std::string& v) { return set_int(v, "-t", -1, kI32Max, a.n_threads); });
  p.option(
      "--stop,-r,--reverse-prompt", "TEXT", "stop string; generation ends before it",
      [&a](const std::string& v) -> Status {
        a.stop.push_back(v);
        return Ok{};
      },
      /*repeatable=*/true);
  p.flag("--ignore-eos", "keep generating past end-of-generation tokens",
         [&a] { a.ignore_eos = true; });
  p.flag("--context-shift",
         "at a full context, discard the oldest half of the tokens after --keep's and go\n"
         "on (recomputed; default: a full context ends the run)",
         [&a] { a.context_shift = true; });
  p.flag("--no-context-shift", "a full context ends the run (the default)",
         [&a] { a.context_shift = false; });
  p.option("--keep", "N",
           "prompt tokens a context shift keeps, after its BOS (0); -1: the whole prompt",
           [&a](const std::string& v) -> Status {
             MINFER_TRY_STATUS(set_int(v, "--keep", -1, kI32Max, a.keep));
             a.keep_given = true;
             return Ok{};
           });
  add_kv_flags(p, a.kv);

  p.section("speculative decoding (single-shot runs; serve takes the same flags)");
  add_spec_flags(p, a.spec, a.model_draft, a.threads_draft);

  p.section("constrained output");
  p.option("--grammar", "GBNF",
           "the output must match this GBNF grammar (llama.cpp's format; start rule root)",
           [&a](const std::string& v) { return set_constraint(a, "--grammar", v); });
  p.option("--grammar-file", "PATH", "the same, the grammar read from a file",
           [&a](const std::string& v) { return set_constraint(a, "--grammar-file", v); });
  p.option("-j,--json-schema", "JSON",
           "the output must be JSON this JSON Schema validates (converted to a grammar)",
           [&a](const std::string& v) { return set_constraint(a, "--json-schema", v); });
  p.option("--json-schema-file", "PATH", "the same, the schema read from a file",
           [&a](const std::string& v) { return set_constraint(a, "--json-schema-file", v); });

  p.section("sampling");
  // One table of defaults: SamplerConfig's (llama.cpp's), shared by the CLI, the chat and
  // the server; --help prints them from it.
  static const sample::SamplerConfig kDefaults;
  p.option("-s,--seed", "N",
           fmt::format("sampling seed; -1: a random one, printed on stderr ({})", kDefaults.seed),
           [&a](const std::string& v) -> Status {
             if (v == "-1") {
               a.seed_random = true;
               return Ok{};
             }
             MINFER_TRY(a.sampler.seed, parse_u64(v, "-s"));
             a.seed_random = false;
             return Ok{};
           });
  p.float_opt("--temp", "T", fmt::format("temperature; 0: greedy ({})", kDefaults.temp), sc.temp,
              0.0f, FLT_MAX);
  p.flag("--greedy", "greedy decoding (same as --temp 0)", [&a] { a.greedy = true; });
  p.int_opt("--top-k", "K", fmt::format("top-k; 0 disables ({})", kDefaults.top_k), sc.top_k, 0,
            kI32Max);
  p.float_opt("--top-p", "P", fmt::format("top-p; 1 disables ({})", kDefaults.top_p), sc.top_p,
              0.0f, 1.0f);
  p.float_opt("--min-p", "P", fmt::format("min-p; 0 disables ({})", kDefaults.min_p), sc.min_p,
              0.0f, 1.0f);
  p.float_opt("--typical", "P",
              fmt::format("locally typical sampling; 1 disables ({})", kDefaults.typical_p),
              sc.typical_p, 0.0f, 1.0f);
  p.float_opt("--repeat-penalty", "R",
              fmt::format("repeat penalty; 1 disables ({})", kDefaults.repeat_penalty),
              sc.repeat_penalty, 0.0f, FLT_MAX);
  p.option("--repeat-last-n", "N",
           fmt::format("penalty window in tokens; 0 disables, -1: the context ({})",
                       kDefaults.repeat_last_n),
           [&a](const std::string& v) {
             return set_int(v, "--repeat-last-n", -1, kI32Max, a.repeat_last_n);
           });
  p.float_opt("--frequency-penalty", "F", "frequency penalty (0)", sc.frequency_penalty, -FLT_MAX,
              FLT_MAX);
  p.float_opt("--presence-penalty", "P", "presence penalty (0)", sc.presence_penalty, -FLT_MAX,
              FLT_MAX);
  p.option("--mirostat", "N", "mirostat: 0 off, 1 v1, 2 v2 (0)",
           [&a](const std::string& v) -> Status {
             MINFER_TRY(const int64_t n, parse_int(v, "--mirostat", 0, 2));
             a.sampler.mirostat = static_cast<sample::Mirostat>(n);
             return Ok{};
           });
  p.float_opt("--mirostat-lr", "ETA", "mirostat learning rate (0.1)", sc.mirostat_eta, 0.0f, 1.0f);
  p.float_opt("--mirostat-ent", "TAU", "mirostat target entropy (5)", sc.mirostat_tau, 0.0f,
              FLT_MAX);
  p.float_opt("--dry-multiplier", "M", "DRY repetition penalty; 0 disables (0)", sc.dry_multiplier,
              0.0f, FLT_MAX);
  p.float_opt("--dry-base", "B", "DRY base (1.75)", sc.dry_base, 1.0f, FLT_MAX);
  p.int_opt("--dry-allowed-length", "N", "DRY: repeats this long are free (2)",
            sc.dry_allowed_length, 0, kI32Max);
  p.option("--dry-penalty-last-n", "N", "DRY window; 0 disables DRY, -1: the context (64)",
           [&a](const std::string& v) {
             return set_int(v, "--dry-penalty-last-n", -1, kI32Max, a.dry_penalty_last_n);
           });
  p.option(
      "--dry-sequence-breaker", "TEXT",
      "text that resets DRY matching; 'none' clears the list (default: none)",
      [&a](const std::string& v) -> Status {
        a.dry_breakers_given = true;
        if (v == "none") {
          a.dry_breakers.clear();
        } else {
          a.dry_breakers.push_back(v);
        }
        return Ok{};
      },
      /*repeatable=*/true);
  p.float_opt("--xtc-probability", "P", "XTC: chance to cut the top tokens; 0 disables (0)",
              sc.xtc_probability, 0.0f, 1.0f);
  p.float_opt("--xtc-threshold", "P", "XTC: probability a cut token must reach (0.5)",
              sc.xtc_threshold, 0.0f, 0.5f);
  p.option(
      "-l,--logit-bias", "ID(+|-)BIAS", "add BIAS to token ID's logit, e.g. 15043+1, 2-inf",
      [&a](const std::string& v) { return add_logit_bias(v, a); }, /*repeatable=*/true);

  p.section("output and debugging");
  p.flag("-v,--verbose", "print the rendered prompt and the sampler settings on stderr",
         [&a] { a.verbose = true; });
  p.flag("--log-disable",
         "no informational lines on stderr (load lines, notices, timings); errors still\n"
         "print",
         [&a] { a.log_disable = true; });
  p.flag("--color", "colour the generated text when standard output is a terminal",
         [&a] { a.color = true; });
  p.string_opt("--dump-graph", "FILE", "write the runtime graph as Graphviz DOT, then exit",
               a.dump_dot);
  p.string_opt("--dump-graph-json", "FILE", "write the runtime graph as JSON, then exit",
               a.dump_graph_json);
  p.string_opt("--dump-logits", "FILE",
               "write the raw f32 logits of every sampling step to this file", a.dump_logits);
  p.string_opt("--dump-json", "FILE",
               "write {prompt_ids, generated_ids, stopped_at_eog, stop} of the run", a.dump_json);
  p.string_opt("--dump-trace", "FILE",
               "write the per-op timing of every forward as Chrome trace-event JSON (Perfetto)",
               a.dump_trace);

  p.section("accepted for llama.cpp compatibility");
  add_compat_flags(p, a.notices, a.mlock);
  p.flag("--no-display-prompt", "accepted: the prompt is never echoed", [] {});
  p.option("-tb,--threads-batch", "N",
           "accepted: prefill and decode share -t's threads (a notice when N differs)",
           [&a](const std::string& v) -> Status {
             int32_t n = 0;
             MINFER_TRY_STATUS(set_int(v, "-tb", -1, kI32Max, n));
             a.n_threads_batch = n;
             return Ok{};
           });
  p.flag("--no-warmup", "accepted: minfer runs no warm-up pass", [] {});
  p.flag("--simple-io", "accepted: output is always plain", [] {});
}

std::string run_help() {
  ArgParser p("minfer MODEL [PROMPT] [flags]");
  RunArgs a;
  add_run_flags(p, a);
  return p.help();
}

}  // namespace minfer::cli

namespace minfer::cli {

std::string process_escapes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '\\' || i + 1 >= text.size()) {
      out += c;
      continue;
    }
    const char n = text[i + 1];
    auto hex = [](char h) -> int {
      if (h >= '0' && h <= '9') return h - '0';
      if (h >= 'a' && h <= 'f') return h - 'a' + 10;
      if (h >= 'A' && h <= 'F') return h - 'A' + 10;
      return -1;
    };
    switch (n) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case 'x':
        if (i + 3 < text.size() + 0 && hex(text[i + 2]) >= 0 && hex(text[i + 3]) >= 0) {
          out += static_cast<char>(hex(text[i + 2]) * 16 + hex(text[i + 3]));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:
        out += c;
        out += n;
    }
    ++i;
  }
  return out;
}

Status prepare_run(RunArgs& a) {
  if (a.escape) {
    a.system = process_escapes(a.system);
    for (std::string& s : a.stop) s = process_escapes(s);
  }
  if (a.greedy) a.sampler.temp = 0.0f;
  if (a.seed_random) {
    std::random_device rd;
    a.sampler.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    log_info("seed: {} (random; -s {} repeats this run)", a.sampler.seed, a.sampler.seed);
  }
  if (a.n_threads_batch && *a.n_threads_batch != a.n_threads) {
    a.notices.push_back(
        fmt::format("-tb {}: prefill uses the same threads as decode (-t); -tb is ignored",
                    *a.n_threads_batch));
  }
  a.n_threads = resolve_threads(a.n_threads);
  if (a.n_batch > 0 && a.n_ubatch > 0) a.n_batch = std::min(a.n_batch, a.n_ubatch);
  if (a.n_batch == 0) a.n_batch = a.n_ubatch;
  if (a.dry_penalty_last_n == 0) a.sampler.dry_multiplier = 0.0f;  // llama.cpp: 0 disables DRY
  if (a.repeat_last_n >= 0) a.sampler.repeat_last_n = a.repeat_last_n;
  if (a.dry_penalty_last_n > 0) a.sampler.dry_penalty_last_n = a.dry_penalty_last_n;
  if (auto st = a.sampler.validate(); !st.ok()) return st;
  const std::pair<const std::string*, const char*> outputs[] = {
      {&a.session, "--session"},       {&a.dump_json, "--dump-json"},
      {&a.dump_trace, "--dump-trace"}, {&a.dump_logits, "--dump-logits"},
      {&a.dump_dot, "--dump-graph"},   {&a.dump_graph_json, "--dump-graph-json"}};
  for (const auto& [path, flag] : outputs) {
    if (!path->empty()) MINFER_TRY_STATUS(check_writable(*path, flag));
  }
  MINFER_TRY_STATUS(check_spec_flags(a.spec, a.model_draft, a.threads_draft));
  if (!a.model_draft.empty()) {
    a.threads_draft = a.threads_draft == 0 ? a.n_threads : resolve_threads(a.threads_draft);
  }
  MINFER_TRY_STATUS(compile_constraint(a));
  // Every usage error that needs no model comes before the model is looked for.
  auto options = engine_options(a.n_threads, a.kv);
  if (!options.ok()) return options.error();
  // A prompt prefills in forwards of 512 tokens unless -b / -ub say otherwise, as
  // llama.cpp's default -ub: the activations of one forward grow with its rows, so a
  // whole long prompt in one forward would cost more memory than its KV cells, and be
  // no faster. The output bytes do not depend on it (invariant 8), except under
  // llama.cpp's numerics, whose bits depend on its ubatches (the tiled attention from 64
  // rows, the tiled and repack matmuls' batches) — there these are its pieces.
  if (a.n_batch == 0) a.n_batch = kDefaultPrefillChunk;
  MINFER_TRY_STATUS(check_template_flags(a));
  if ((a.spec.ngram > 0 || !a.model_draft.empty()) && engine::llamacpp_family(options->numerics)) {
    a.notices.push_back(
        "speculative decoding under --numerics llamacpp*: llama.cpp's arithmetic makes a row "
        "depend on its batch in places, so the output may differ from the run without it (as "
        "llama.cpp's does)");
  }
  if (a.keep_given && !a.context_shift) {
    a.notices.push_back(fmt::format(
        "--keep {}: no effect without --context-shift (a full context ends the run)", a.keep));
  }
  if (auto n = ngl_notice(a.kv)) a.notices.push_back(*n);
  for (const std::string& n : a.notices) log_info("notice: {}", n);
  return Ok{};
}

Result<std::unique_ptr<engine::Engine>> load_engine(const RunArgs& a, const std::string& model_arg,
                                                    int32_t n_threads) {
  MINFER_TRY(const std::string path, resolve_model_path(model_arg));
  log_info("Loading model: {}", path);
  MINFER_TRY(const engine::EngineOptions options,
             engine_options(n_threads > 0 ? n_threads : a.n_threads, a.kv));
  MINFER_TRY(std::unique_ptr<engine::Engine> e, open_engine(path, options));
  if (!e->has_tokenizer()) {
    return make_error("the model has no tokenizer metadata (tokenizer.ggml.*)");
  }
  if (a.mlock) lock_memory();
  return e;
}

Status check_template_flags(const RunArgs& a) {
  if (!a.chat_template.empty() && !a.template_file.empty()) {
    return make_error("give --chat-template or --chat-template-file, not both");
  }
  if (!a.chat_template.empty() && a.chat_template != "chatml" &&
      a.chat_template.find("{%") == std::string::npos &&
      a.chat_template.find("{{") == std::string::npos) {
    return make_error("--chat-template: unknown template name '" + a.chat_template +
                      "' (known: chatml; or give the Jinja text itself, or "
                      "--chat-template-file)");
  }
  if (!a.chat_template_kwargs.empty()) {
    const auto kwargs = nlohmann::ordered_json::parse(a.chat_template_kwargs, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) {
      return make_error(
          "--chat-template-kwargs: expected a JSON object, e.g. "
          "'{\"enable_thinking\": false}'");
    }
  }
  return Ok{};
}

Result<chat::RendererChoice> choose_renderer(const RunArgs& a, const tokenizer::Tokenizer& tok) {
  MINFER_TRY_STATUS(check_template_flags(a));
  std::string source;
  if (!a.template_file.empty()) {
    MINFER_TRY(source, read_input_file(a.template_file));
    if (source.empty())
      return make_error("--chat-template-file '" + a.template_file + "' is empty");
  } else if (a.chat_template == "chatml") {
    return chat::RendererChoice{.renderer = std::make_unique<chat::ChatMlRenderer>(),
                                .fallback = false};
  } else if (!a.chat_template.empty()) {
    source = a.chat_template;  // Jinja text (check_template_flags)
  }
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (!a.chat_template_kwargs.empty()) {
    kwargs = nlohmann::ordered_json::parse(a.chat_template_kwargs, nullptr, false);
  }
  chat::RendererChoice choice = chat::renderer_for(tok, source, std::move(kwargs));
  if (choice.fallback) {
    log_info("Notice: this GGUF has no tokenizer.chat_template; using {}", choice.fallback_name);
  }
  MINFER_TRY_STATUS(chat::validate_renderer(*choice.renderer));
  return choice;
}

Result<uint32_t> run_context(const RunArgs& a, const engine::Context& e, uint32_t n_prompt) {
  const uint32_t model_ctx = e.hparams().n_ctx_train;
  uint32_t ctx = 0;
  if (a.n_ctx) {
    ctx = *a.n_ctx == 0 ? model_ctx : *a.n_ctx;
    if (ctx > model_ctx) {
      log_info("notice: -c {} capped at {} (the model's context length)", ctx, model_ctx);
      ctx = model_ctx;
    }
  } else {
    const uint64_t want =
        static_cast<uint64_t>(n_prompt) + static_cast<uint64_t>(std::max<int32_t>(a.n_predict, 0));
    ctx = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(4096, want), model_ctx));
  }
  if (n_prompt >= ctx) {
    // The hint never names a context the model cannot have.
    if (n_prompt >= model_ctx) {
      return make_error(fmt::format(
          "the prompt has {} tokens but the model's context holds at most {}: no room to "
          "generate (shorten the prompt)",
          n_prompt, model_ctx));
    }
    const uint64_t need = std::min<uint64_t>(
        model_ctx, static_cast<uint64_t>(n_prompt) + std::max<int32_t>(a.n_predict, 1));
    return make_error(fmt::format(
        "the prompt has {} tokens but the context holds {}{}: no room to generate (-c {}, "
        "up to the model's {})",
        n_prompt, ctx, a.n_ctx ? fmt::format(" (-c {})", *a.n_ctx) : "", need, model_ctx));
  }
  return ctx;
}

Status finish_sampler(RunArgs& a, const engine::Context& e, uint32_t n_ctx) {
  sample::SamplerConfig& sc = a.sampler;
  if (a.repeat_last_n < 0) sc.repeat_last_n = static_cast<int32_t>(n_ctx);
  if (a.dry_penalty_last_n == -1) sc.dry_penalty_last_n = static_cast<int32_t>(n_ctx);
  sc.dry_sequence_breakers.clear();
  for (const std::string& b : a.dry_breakers) {
    MINFER_TRY(std::vector<tokenizer::TokenId> ids,
               e.tokenizer().encode(b, {.add_special = false, .parse_special = false}));
    if (!ids.empty()) sc.dry_sequence_breakers.push_back(std::move(ids));
  }
  MINFER_TRY_STATUS(sc.validate());
  return sc.validate_for_vocab(e.tokenizer().n_vocab());
}

ThoughtPrinter::ThoughtPrinter() : tty_(isatty(fileno(stderr)) != 0) {}

void ThoughtPrinter::print(std::string_view text) {
  if (text.empty()) return;
  if (tty_ && !open_) std::fputs("\x1b[2m", stderr);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  open_ = true;
}

void ThoughtPrinter::end() {
  if (!open_) return;
  std::fputs(tty_ ? "\x1b[0m\n" : "\n", stderr);
  open_ = false;
}

}  // namespace minfer::cli
