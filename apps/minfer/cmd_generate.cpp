// Stage 18 (CLI): `minfer MODEL [PROMPT] [flags]` — single-shot generation. Parses the
// flags, loads the engine, tokenizes the prompt and hands over to engine::generate;
// prints the run header lines on stderr and only generated text on stdout.
// The prompt is the user message of a one-turn conversation rendered with the model's
// chat template (ChatML, with a notice, when the GGUF has none); --no-template uses it
// as raw text. -cnv hands the parsed flags to the conversation mode (cmd_chat).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "chat/renderer.h"
#include "commands.h"
#include "core/config.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/trace.h"
#include "engine_flags.h"
#include "files.h"
#include "graph/export.h"
#include "model_path.h"
#include "run_flags.h"

namespace minfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

double rate(double n, double s) {
  return s > 0.0 ? n / s : 0.0;
}

// MINFER_OP_TIMING: per op kind, the nodes per step and the time summed over the decode
// steps; printed as one table, slowest kind first.
struct OpTotals {
  std::array<uint64_t, static_cast<size_t>(graph::Op::kCount)> ns{};
  std::array<uint64_t, static_cast<size_t>(graph::Op::kCount)> nodes{};
  uint64_t steps = 0, step_ns = 0;
  void add(const sched::ExecProfile& p) {
    steps++;
    step_ns += p.dur_ns;
    for (const sched::OpSpan& o : p.ops) {
      ns[static_cast<size_t>(o.op)] += o.dur_ns;
      nodes[static_cast<size_t>(o.op)]++;
    }
  }
  void print() const {
    if (steps == 0) {
      log_info("[MINFER_OP_TIMING] no decode step ran");
      return;
    }
    uint64_t in_ops = 0;
    std::vector<size_t> order;
    for (size_t i = 0; i < ns.size(); ++i) {
      in_ops += ns[i];
      if (nodes[i] > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return ns[x] > ns[y]; });
    const double n = static_cast<double>(steps);
    log_info("[MINFER_OP_TIMING] over {} decode steps: {:.3f} ms per step, {:.3f} ms of it in ops",
             steps, 1e-6 * static_cast<double>(step_ns) / n,
             1e-6 * static_cast<double>(in_ops) / n);
    for (size_t i : order) {
      log_info("[MINFER_OP_TIMING]   {:<14} {:>5} nodes/step {:>9.3f} ms/step {:>5.1f}%",
               graph::op_name(static_cast<graph::Op>(i)), nodes[i] / steps,
               1e-6 * static_cast<double>(ns[i]) / n,
               in_ops > 0 ? 100.0 * static_cast<double>(ns[i]) / static_cast<double>(in_ops) : 0.0);
    }
  }
};

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return make_error("cannot open '" + path + "' for writing");
  f << text;
  f.close();
  if (!f) return make_error("error writing '" + path + "'");
  return Ok{};
}

}  // namespace

std::string generate_help() {
  return run_help();
}

int run_generate(const std::vector<std::string>& args, bool ollama_run) {
  ArgParser parser("minfer MODEL [PROMPT] [flags]");
  RunArgs a;
  add_run_flags(parser, a);
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(parser, args, parsed)) return *done;
  a.positionals = std::move(parsed.positionals);
  if (a.log_disable) set_log_enabled(false);  // before the first line a run prints
  if (ollama_run && a.mode == RunMode::kAuto && !a.prompt && a.prompt_file.empty() &&
      a.positionals.size() == (a.model_opt.empty() ? 1u : 0u) && isatty(fileno(stdin))) {
    a.mode = RunMode::kConversation;
  }
  if (a.mode == RunMode::kConversation) {
    if (!a.dump_trace.empty()) return fail("--dump-trace traces single-shot runs, not -cnv");
    return run_chat(a);
  }
  if (!a.session.empty()) return fail("--session needs the conversation mode (-cnv)");
  if (a.multiline) log_info("notice: -mli only applies to the conversation mode (-cnv)");
  engine::GenerateOptions gen;
  const bool& no_template = a.no_template;
  const std::string& dump_dot = a.dump_dot;
  const std::string& dump_json = a.dump_graph_json;

  // MODEL [PROMPT] positionals, or -m / -p / -f.
  std::string model_arg = a.model_opt;
  size_t next = 0;
  if (model_arg.empty()) {
    if (a.positionals.empty()) return fail("no model given (minfer MODEL [PROMPT] [flags])");
    model_arg = a.positionals[next++];
  }
  std::optional<std::string> prompt_opt = a.prompt;
  if (next < a.positionals.size()) {
    if (prompt_opt) return fail("give the prompt as an argument or with -p, not both");
    prompt_opt = a.positionals[next++];
  }
  if (next < a.positionals.size()) {
    return fail(fmt::format("unexpected argument '{}' (a prompt with spaces needs quotes)",
                            a.positionals[next]));
  }
  if (!a.prompt_file.empty() && prompt_opt)
    return fail("give the prompt as text or with -f, not both");
  if (no_template && !a.system.empty())
    return fail("--system needs the chat template (drop --no-template)");
  if (auto st = prepare_run(a); !st.ok()) return fail(st.error().message);

  std::string prompt;
  if (prompt_opt) {
    prompt = *prompt_opt;
  } else {
    // A prompt file or stdin loses one trailing newline (what an editor or `echo`
    // adds), as llama.cpp's -f does.
    if (!a.prompt_file.empty()) {
      auto text = read_input_file(a.prompt_file);
      if (!text) return fail(text.error().message);
      prompt = std::move(*text);
    } else {
      if (isatty(fileno(stdin))) {
        log_info("reading the prompt from stdin; Ctrl-D to end");
      }
      prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    if (!prompt.empty() && prompt.back() == '\n') prompt.pop_back();
  }
  if (a.escape) prompt = process_escapes(prompt);
  gen.n_predict = a.n_predict;
  gen.stop = a.stop;
  gen.ignore_eos = a.ignore_eos;
  gen.n_batch = a.n_batch;

  const Config& config = Config::get();
  gen.timing = config.timing;
  const auto t_load = Clock::now();
  auto eng = load_engine(a, model_arg);
  if (!eng) return fail(eng.error().message);
  engine::Engine& e = **eng;
  if (Status st = require_generative(e, "generate"); !st.ok()) return fail(st.error().message);
  log_info("Model loaded in {:.2f} s: {}",
           std::chrono::duration<double>(Clock::now() - t_load).count(),
           model::describe(e.hparams()));

  chat::ThinkingPlan thinking;
  if (!no_template) {
    auto choice = choose_renderer(a, e.tokenizer());
    if (!choice) return fail(choice.error().message);
    std::vector<chat::Message> messages;
    if (!a.system.empty()) messages.push_back({.role = "system", .content = a.system});
    messages.push_back({.role = "user", .content = prompt});
    auto rendered = choice->renderer->render(messages, true);
    if (!rendered) return fail(rendered.error().message);
    prompt = std::move(*rendered);
    thinking = chat::plan_thinking(choice->renderer->source(), prompt, a.reasoning_budget,
                                   !a.constraint_flag.empty());
  } else if (!a.chat_template.empty() || !a.template_file.empty()) {
    return fail("--chat-template needs the chat template (drop --no-template)");
  }
  if (a.verbose) log_info("[verbose] prompt text:\n{}\n[verbose] end of prompt", prompt);
  // parse_special: control-token text in a raw prompt (e.g. <|im_start|>) becomes those
  // tokens, as llama.cpp's completion tool does; a rendered prompt gets BOS unless the
  // template wrote it.
  auto ids = no_template
                 ? e.tokenizer().encode(prompt, {.add_special = true, .parse_special = true})
                 : chat::tokenize_prompt(e.tokenizer(), prompt);
  if (!ids) return fail(ids.error().message);
  if (ids->empty()) return fail("the prompt encodes to no tokens");
  {
    // A BOS typed into a raw prompt on a vocabulary that adds one: llama.cpp's warning.
    const tokenizer::SpecialIds& sp = e.tokenizer().special();
    if (sp.add_bos && ids->size() >= 2 && (*ids)[0] == sp.bos && (*ids)[1] == sp.bos) {
      log_info(
          "warning: the prompt starts with two BOS tokens (the model adds one and the "
          "prompt has one); drop it from the prompt");
    }
  }
  // n_ctx is decided once for the run: prefill and decode size the same KV regions.
  auto ctx_or = run_context(a, e, static_cast<uint32_t>(ids->size()));
  if (!ctx_or) return fail(ctx_or.error().message);
  const uint32_t ctx = *ctx_or;
  if (auto st = e.set_n_ctx(ctx); !st.ok()) return fail(st.error().message);
  if (auto st = finish_sampler(a, e, ctx); !st.ok()) return fail(st.error().message);
  gen.sampler = a.sampler;
  gen.context_shift = a.context_shift;
  gen.n_keep = engine::keep_count(a.keep, *ids, e.tokenizer());
  if (gen.context_shift && engine::shift_discard(static_cast<int32_t>(ctx), gen.n_keep) == 0) {
    log_info(
        "notice: --context-shift: --keep keeps {} of the {} positions, none left to discard; a "
        "full context ends the run",
        gen.n_keep, ctx);
  }
  // -md: the draft model, with the target's engine flags and context size.
  std::unique_ptr<engine::Engine> draft;
  if (!a.model_draft.empty()) {
    auto d = load_engine(a, a.model_draft, a.threads_draft);
    if (!d) return fail("draft model: " + d.error().message);
    draft = std::move(*d);
    if (Status st = require_generative(*draft, "generate"); !st.ok())
      return fail("draft model: " + st.error().message);
    if (Status st = engine::check_draft_vocab(e.tokenizer(), draft->tokenizer()); !st.ok())
      return fail(st.error().message);
    if (Status st = draft->set_n_ctx(ctx); !st.ok())
      return fail("draft model: " + st.error().message);
    log_info("Draft model: {}, threads {}", model::describe(draft->hparams()), draft->n_threads());
  }
  gen.spec = a.spec;
  gen.spec.draft = draft.get();
  gen.make_constraint = constraint_factory(a, e.tokenizer());
  auto reasoning =
      chat::reasoning_options(thinking, e.tokenizer(), a.reasoning_split, a.reasoning_budget);
  if (!reasoning) return fail(reasoning.error().message);
  gen.reasoning = std::move(*reasoning);
  if (a.verbose) {
    const sample::SamplerConfig& sc = gen.sampler;
    log_info(
        "[verbose] sampler: seed {} temp {} top_k {} top_p {} min_p {} typical {} "
        "repeat_penalty {} (last {}) frequency {} presence {} mirostat {} (tau {} eta {}) "
        "dry {} (base {} allowed {} last {}) xtc {} (threshold {}) logit_bias {}",
        sc.seed, sc.temp, sc.top_k, sc.top_p, sc.min_p, sc.typical_p, sc.repeat_penalty,
        sc.repeat_last_n, sc.frequency_penalty, sc.presence_penalty, static_cast<int>(sc.mirostat),
        sc.mirostat_tau, sc.mirostat_eta, sc.dry_multiplier, sc.dry_base, sc.dry_allowed_length,
        sc.dry_penalty_last_n, sc.xtc_probability, sc.xtc_threshold, sc.logit_bias.size());
  }
  log_info("Prompt: {} tokens, n_ctx {}, threads {}", ids->size(), ctx, e.n_threads());

  if (!dump_dot.empty() || !dump_json.empty()) {
    // The graph the first forward of this prompt would run (prefill; decode for a
    // one-token prompt), placed and fused.
    const auto n = static_cast<uint32_t>(ids->size());
    auto g = e.runtime_graph(n, 1);
    if (!g) return fail(g.error().message);
    const char* kind = n == 1 ? "decode" : "prefill";
    if (!dump_dot.empty()) {
      if (auto st = write_text(dump_dot, graph::to_dot(*g)); !st.ok())
        return fail(st.error().message);
      log_info("wrote {} graph ({} nodes) to {}", kind, g->size(), dump_dot);
    }
    if (!dump_json.empty()) {
      if (auto st = write_text(dump_json, graph::to_json(*g, 1)); !st.ok()) {
        return fail(st.error().message);
      }
      log_info("wrote {} graph ({} nodes) to {}", kind, g->size(), dump_json);
    }
    return 0;
  }

  // --dump-logits / --dump-json: what the golden comparisons read (tests/golden).
  std::FILE* logits_file = nullptr;
  if (!a.dump_logits.empty()) {
    logits_file = std::fopen(a.dump_logits.c_str(), "wb");
    if (logits_file == nullptr) return fail("cannot open '" + a.dump_logits + "' for writing");
    gen.on_logits = [logits_file](std::span<const float> l) {
      std::fwrite(l.data(), sizeof(float), l.size(), logits_file);
    };
  }
  struct FileCloser {
    std::FILE* f;
    ~FileCloser() {
      if (f != nullptr) std::fclose(f);
    }
  } closer{logits_file};

  // Standard output carries only the generated text; when it is a terminal, the run
  // ends with a newline if the text did not (docs/USAGE.md), so the shell prompt starts
  // on its own line. A pipe or file gets the bytes exactly.
  const bool out_tty = isatty(fileno(stdout)) != 0;
  const bool color = a.color && out_tty;
  char last = '\n';
  bool wrote = false;
  auto answer_sink = [&](std::string_view text) {
    if (color && !wrote) std::fputs("\x1b[32m", stdout);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    wrote = true;
    last = text.back();
  };
  // A thinking block's text goes to stderr, so stdout carries the answer alone.
  ThoughtPrinter thought;
  gen.reasoning_sink = [&](std::string_view text) { thought.print(text); };
  auto sink = [&](std::string_view text) {
    thought.end();
    answer_sink(text);
  };
  auto gen_or = engine::Generator::create(e, gen, sink);
  if (!gen_or) return fail(gen_or.error().message);
  engine::Generator& g = **gen_or;
  // --dump-trace: every forward's per-op spans, prefill then decode steps.
  // MINFER_OP_TIMING: the decode steps' time per op kind, summed (printed at the end).
  std::optional<engine::TraceWriter> trace;
  const char* phase = "prefill";
  OpTotals op_totals;
  if (!a.dump_trace.empty()) trace.emplace("minfer " + model_arg);
  if (trace || config.op_timing) {
    e.set_profile_hook([&](const sched::ExecProfile& p) {
      if (trace) trace->add(p, phase);
      if (config.op_timing && phase[0] == 'd') op_totals.add(p);
    });
  }
  if (auto st = g.prefill(*ids); !st.ok()) return fail(st.error().message);
  phase = "decode";
  const engine::GenerateStats& s = g.stats();
  log_info("Prefill: {} tokens in {:.3f} s ({:.1f} tok/s)", s.n_prompt, s.prefill_s,
           rate(s.n_prompt, s.prefill_s));
  Status loop = Ok{};
  for (;;) {
    auto more = g.step();
    if (!more) {
      loop = more.error();
      break;
    }
    if (!*more) break;
  }
  g.finish();
  thought.end();
  e.set_profile_hook(nullptr);
  if (color && wrote) std::fputs("\x1b[0m", stdout);
  if (out_tty && last != '\n') std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!loop.ok()) return fail(loop.error().message);
  if (!a.dump_json.empty()) {
    nlohmann::json j;
    j["prompt_ids"] = *ids;
    j["generated_ids"] = g.generated();
    j["stopped_at_eog"] = s.stop == engine::StopReason::kEog;
    j["stop"] = engine::stop_reason_name(s.stop);
    if (auto st = write_text(a.dump_json, j.dump() + "\n"); !st.ok())
      return fail(st.error().message);
  }
  log_info("Generated: {} tokens in {:.3f} s ({:.1f} tok/s), stop: {}", s.n_generated, s.decode_s,
           rate(s.n_generated, s.decode_s), engine::stop_reason_name(s.stop));
  if (gen.spec.enabled()) {
    // llama.cpp's speculative example reports n_drafted, n_accept and accept %.
    log_info(
        "speculative: drafted {} tokens, accepted {} ({:.1f}%), {} forwards for {} tokens "
        "({:.2f} per forward; {} verified a draft)",
        s.n_drafted, s.n_accepted,
        s.n_drafted > 0
            ? 100.0 * static_cast<double>(s.n_accepted) / static_cast<double>(s.n_drafted)
            : 0.0,
        s.n_forwards, s.n_generated,
        s.n_forwards > 0 ? static_cast<double>(s.n_generated) / s.n_forwards : 0.0,
        s.n_spec_forwards);
    if (draft) {
      log_info("draft model: {} forwards in {:.3f} s", s.n_draft_forwards, s.draft_s);
    }
  }
  if (gen.context_shift) {
    log_info("context shifts: {} ({} tokens discarded, the first {} kept)", s.n_shifts,
             s.n_discarded, gen.n_keep);
  }
  log_info("rebuilds: {}, reuses: {}", s.decode_rebuilds, s.decode_reuses);
  if (trace) {
    if (auto st = trace->write(a.dump_trace); !st.ok()) return fail(st.error().message);
    log_info("wrote trace ({} forwards, {} op spans) to {}", trace->n_steps(), trace->n_spans(),
             a.dump_trace);
  }
  if (config.op_timing) op_totals.print();
  if (config.timing && s.n_samples > 0) {
    const double n = s.n_samples;
    const double total = s.decode_s > 0 ? s.decode_s : 1.0;
    log_info(
        "[MINFER_TIMING] over {} tokens: sample {:.3f} ms/tok ({:.1f}%), forward {:.3f} "
        "ms/tok ({:.1f}%)",
        s.n_samples, 1e3 * s.sample_s / n, 100.0 * s.sample_s / total,
        s.n_forwards > 0 ? 1e3 * s.forward_s / s.n_forwards : 0.0, 100.0 * s.forward_s / total);
  }
  return 0;
}

}  // namespace minfer::cli
