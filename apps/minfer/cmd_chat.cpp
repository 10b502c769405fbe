// Stage 18 (CLI): `minfer MODEL -cnv [flags]` — an interactive conversation on one
// append-only KV (src/chat). Reads lines with libedit (history, line editing) when
// stdin is a terminal and plain lines otherwise; the reply streams to stdout, every
// report, notice and command answer goes to stderr. Ctrl-C stops the reply being
// generated, not the conversation; SIGTERM, SIGHUP and SIGPIPE end it after saving the
// session. With --session the file is rewritten (atomically) after every turn.
#include <editline/readline.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "chat/conversation.h"
#include "chat/renderer.h"
#include "commands.h"
#include "core/log.h"
#include "engine/engine.h"
#include "files.h"
#include "run_flags.h"

namespace minfer::cli {
namespace {

double rate(double n, double s) {
  return s > 0.0 ? n / s : 0.0;
}

constexpr const char* kHelp =
    "commands:\n"
    "  /help          this list\n"
    "  /regen [N]     drop the last reply and generate it again (N >= 0: replay draw N;\n"
    "                 0 = the original reply)\n"
    "  /clear         forget the conversation (the system prompt stays)\n"
    "  /exit, /quit   end the conversation (so does Ctrl-D); Ctrl-C stops a reply\n"
    "  a line ending with '\\' continues on the next line (-mli: lines join until one\n"
    "  ends with '/')\n";

// SIGINT stops the reply in progress; SIGTERM/SIGHUP/SIGPIPE also end the conversation
// (after the session is saved). The handlers only touch atomics.
chat::Conversation* g_conversation = nullptr;
volatile std::sig_atomic_t g_sigint = 0;
volatile std::sig_atomic_t g_quit = 0;  // the signal that ends the conversation
extern "C" void on_sigint(int) {
  g_sigint = 1;
  if (g_conversation != nullptr) g_conversation->interrupt();
}
extern "C" void on_quit(int sig) {
  g_quit = sig;
  if (g_conversation != nullptr) g_conversation->interrupt();
}

// One physical line; nullopt at end of input (or when a quit signal arrived).
std::optional<std::string> read_physical(bool tty, const char* prompt) {
  if (tty) {
    for (;;) {
      g_sigint = 0;
      char* line = readline(prompt);
      if (g_quit) {
        std::free(line);
        return std::nullopt;
      }
      if (line == nullptr) {
        if (g_sigint) {  // Ctrl-C at the prompt: a fresh prompt, not an exit
          std::fputc('\n', stdout);
          continue;
        }
        return std::nullopt;
      }
      std::string s(line);
      std::free(line);
      return s;
    }
  }
  std::string s;
  if (!std::getline(std::cin, s) || g_quit) return std::nullopt;
  return s;
}

// One message: physical lines joined — by default while a line ends with '\'
// (removed), with -mli until a line ends with '/' (removed) or the input ends.
std::optional<std::string> read_message(bool tty, bool multiline) {
  std::string msg;
  bool first = true;
  for (;;) {
    std::optional<std::string> line = read_physical(tty, first ? "> " : ". ");
    if (!line) {
      if (first || msg.empty()) return std::nullopt;
      break;
    }
    if (!first) msg += '\n';
    first = false;
    const char cont = multiline ? '/' : '\\';
    const bool ends = !line->empty() && line->back() == cont;
    if (ends) line->pop_back();
    msg += *line;
    if (multiline ? ends : !ends) break;
  }
  if (tty && !msg.empty()) add_history(msg.c_str());
  return msg;
}

// Notices about a turn come before its stats line.
void report(const chat::TurnStats& s) {
  if (s.n_dropped_turns > 0) {
    log_info("[turn {}] context full: dropped the oldest {} turn(s), system prompt kept", s.turn,
             s.n_dropped_turns);
  }
  if (s.n_rewound > 0 && s.n_dropped_turns == 0) {
    log_info(
        "[turn {}] the template render differs from the KV after token {}: {} token(s) "
        "rewound and re-prefilled",
        s.turn, s.n_reused, s.n_rewound);
  }
  if (s.n_shifts > 0) {
    log_info("[turn {}] context shift: {} time(s), {} token(s) discarded, the first {} kept",
             s.turn, s.n_shifts, s.n_discarded, s.n_keep);
  }
  log_info(
      "[turn {}{}] prefill {} tokens ({} reused) in {:.3f} s ({:.1f} tok/s), generated {} "
      "tokens in {:.3f} s ({:.1f} tok/s), {}",
      s.turn, s.regen ? fmt::format(" regen {}", s.attempt) : "", s.n_prefilled, s.n_reused,
      s.prefill_s, rate(s.n_prefilled, s.prefill_s), s.n_generated, s.decode_s,
      rate(s.n_generated, s.decode_s), chat::reply_end_name(s.end));
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns, the loop re-checks
  sigaction(sig, &sa, nullptr);
}

}  // namespace

int run_chat(RunArgs& a) {
  if (a.spec.ngram > 0 || !a.model_draft.empty()) {
    return fail("speculative decoding (--spec-ngram, -md) runs single-shot generation, not -cnv");
  }
  if (a.no_template) {
    return fail("--cnv needs the chat template; --no-template is refused in conversation mode");
  }
  std::string model_arg = a.model_opt;
  size_t next = 0;
  if (model_arg.empty()) {
    if (a.positionals.empty()) return fail("no model given (minfer MODEL -cnv)");
    model_arg = a.positionals[next++];
  }
  std::optional<std::string> first = a.prompt;
  if (next < a.positionals.size()) {
    if (first) return fail("give the first message as an argument or with -p, not both");
    first = a.positionals[next++];
  }
  if (next < a.positionals.size()) {
    return fail(fmt::format("unexpected argument '{}' (a message with spaces needs quotes)",
                            a.positionals[next]));
  }
  if (!a.prompt_file.empty()) {
    if (first) return fail("give the first message as text or with -f, not both");
    auto text = read_input_file(a.prompt_file);
    if (!text) return fail(text.error().message);
    first = std::move(*text);
    if (!first->empty() && first->back() == '\n') first->pop_back();
  }
  for (const std::string* dump : {&a.dump_dot, &a.dump_graph_json, &a.dump_logits, &a.dump_json}) {
    if (!dump->empty()) return fail("the --dump-* flags apply to single-shot generation, not -cnv");
  }
  if (auto st = prepare_run(a); !st.ok()) return fail(st.error().message);
  if (a.escape && first) first = process_escapes(*first);

  auto eng = load_engine(a, model_arg);
  if (!eng) return fail(eng.error().message);
  engine::Engine& e = **eng;
  auto choice = choose_renderer(a, e.tokenizer());
  if (!choice) return fail(choice.error().message);
  auto ctx_or = run_context(a, e, 0);
  if (!ctx_or) return fail(ctx_or.error().message);
  const uint32_t ctx = *ctx_or;
  if (auto st = e.set_n_ctx(ctx); !st.ok()) return fail(st.error().message);
  if (auto st = finish_sampler(a, e, ctx); !st.ok()) return fail(st.error().message);
  // A thinking block's text goes to stderr (as single-shot prints it), the answer to
  // stdout; --reasoning-format none keeps it all on stdout.
  ThoughtPrinter thought;
  chat::ConversationOptions opts{.n_predict = a.n_predict,
                                 .stop = a.stop,
                                 .sampler = a.sampler,
                                 .system = a.system,
                                 .ignore_eos = a.ignore_eos,
                                 .n_batch = a.n_batch,
                                 .make_constraint = constraint_factory(a, e.tokenizer()),
                                 .thinking = true,
                                 .reasoning_split = a.reasoning_split,
                                 .reasoning_budget = a.reasoning_budget,
                                 .on_reasoning = [&](std::string_view t) { thought.print(t); },
                                 .context_shift = a.context_shift,
                                 .keep = a.keep};
  auto conv_or = chat::Conversation::create(e, *choice->renderer, std::move(opts));
  if (!conv_or) return fail(conv_or.error().message);
  chat::Conversation& conv = **conv_or;
  log_info("{} — n_ctx {}, threads {}; /help for commands", model::describe(e.hparams()), ctx,
           e.n_threads());

  if (!a.session.empty()) {
    struct stat st {};
    const bool exists = ::stat(a.session.c_str(), &st) == 0;
    if (exists && st.st_size == 0) {
      log_info("[session] '{}' is empty: a new session", a.session);
    } else if (exists) {
      auto info = conv.load(a.session);
      if (!info) return fail(info.error().message);
      log_info("[session] resumed {} message(s) and {} KV row(s) from {} — 0 tokens prefilled",
               info->n_messages, info->n_kv_tokens, a.session);
      if (!a.system.empty() &&
          (conv.messages().empty() || conv.messages()[0].content != a.system)) {
        log_info("[session] note: --system ignored; the session keeps its own");
      }
    }
  }

  g_conversation = &conv;
  install(SIGINT, on_sigint);
  for (int sig : {SIGTERM, SIGHUP, SIGPIPE}) install(sig, on_quit);

  const bool tty = isatty(fileno(stdin)) != 0;
  if (tty) using_history();
  const bool color = a.color && isatty(fileno(stdout));
  auto sink = [color, &thought](std::string_view text) {
    thought.end();
    if (color) std::fputs("\x1b[32m", stdout);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (color) std::fputs("\x1b[0m", stdout);
    std::fflush(stdout);
  };
  int exit_code = 0;
  int32_t n_turns = 0, n_regens = 0;
  // A command the user typed wrong, or a message refused: said on stderr; with piped
  // input (a script) it also makes the exit status 1.
  auto refuse = [&](const std::string& message) {
    fmt::print(stderr, "error: {}\n", message);
    if (!tty) exit_code = 1;
  };
  auto save = [&]() -> bool {
    if (a.session.empty()) return true;
    if (auto st = conv.save(a.session); !st.ok()) {
      fmt::print(stderr, "minfer: error: {}\n", st.error().message);
      exit_code = 1;
      return false;
    }
    return true;
  };
  for (;;) {
    if (g_quit) break;
    std::optional<std::string> line = first ? first : read_message(tty, a.multiline);
    first.reset();
    if (!line) break;
    const std::string& in = *line;
    if (in.empty()) continue;
    Result<chat::TurnStats> r = make_error("");
    if (in[0] == '/') {
      const std::string cmd = in.substr(0, in.find(' '));
      if (cmd == "/exit" || cmd == "/quit") break;
      if (cmd == "/help") {
        std::fputs(kHelp, stderr);
        continue;
      }
      if (cmd == "/clear") {
        conv.clear();
        log_info("[history cleared]");
        save();
        continue;
      }
      if (cmd == "/regen") {
        int32_t attempt = -1;
        if (in.size() > cmd.size()) {
          const std::string arg = in.substr(cmd.size() + 1);
          const char* end = arg.data() + arg.size();
          auto [p, ec] = std::from_chars(arg.data(), end, attempt);
          if (arg.empty() || p != end || ec != std::errc{} || attempt < 0) {
            refuse(fmt::format("/regen {}: N must be an integer >= 0 (usage: /regen [N])", arg));
            continue;
          }
        }
        r = conv.regen(sink, attempt);
        if (r) n_regens++;
      } else {
        refuse(fmt::format("unknown command '{}' — try /help", cmd));
        continue;
      }
    } else {
      r = conv.user_turn(in, sink);
      if (r) n_turns++;
    }
    thought.end();
    if (!r) {
      refuse(r.error().message);
      continue;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    report(*r);
    if (r->end == chat::ReplyEnd::kInterrupted && !g_quit) log_info("[reply stopped]");
    save();
    if (a.single_turn) break;
  }
  g_conversation = nullptr;
  if (g_quit) {
    log_info("[signal {}] ending the conversation", static_cast<int>(g_quit));
  }
  if (!a.session.empty() && save()) {
    log_info("[session] saved {} message(s) and {} KV row(s) to {}", conv.messages().size(),
             conv.cursor(), a.session);
  }
  log_info("conversation ended after {} turn(s){}", n_turns,
           n_regens > 0 ? fmt::format(" and {} regen(s)", n_regens) : "");
  if (g_quit) return 128 + static_cast<int>(g_quit);
  return exit_code;
}

}  // namespace minfer::cli
