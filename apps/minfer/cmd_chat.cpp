// Stage 18 (CLI): `minfer MODEL --cnv [flags]` — an interactive conversation on one
// append-only KV (src/chat). Reads lines with libedit (history, line editing) when
// stdin is a terminal and plain lines otherwise; the reply streams to stdout, per-turn
// reports go to stderr. Ctrl-C stops the reply being generated, not the session.
#include <editline/readline.h>
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "chat/conversation.h"
#include "chat/renderer.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

double rate(double n, double s) {
  return s > 0.0 ? n / s : 0.0;
}

struct ChatArgs {
  KvFlags kv;
  std::vector<std::string> positionals;
  std::string model_opt;
  std::string system;
  std::string session;
  std::string template_file;
  chat::ConversationOptions conv;
  uint32_t n_ctx = 4096;
  int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool cnv = false, greedy = false, no_template = false, color = false;
};

void add_flags(CLI::App& app, ChatArgs& a) {
  a.conv.n_predict = 512;  // the CLI's -n default (docs/USAGE.md), per reply
  sample::SamplerConfig& sc = a.conv.sampler;
  app.add_option("args", a.positionals, "MODEL [FIRST MESSAGE]")->expected(0, 2);
  app.add_option("-m,--model", a.model_opt, "GGUF file");
  app.add_flag("--cnv,--conversation", a.cnv, "interactive conversation (this mode)");
  app.add_option("--system", a.system, "system prompt (the first message)");
  app.add_option("--session", a.session,
                 "resume from / save to this file (history + KV, bound to the model)");
  app.add_option("--chat-template-file", a.template_file,
                 "Jinja chat template to use instead of the model's");
  app.add_flag("--no-template", a.no_template, "refused: a conversation needs a template");
  app.add_option("-n,--n-predict", a.conv.n_predict,
                 "tokens per reply at most (-1: until end of turn or a full context)")
      ->capture_default_str();
  app.add_option("--stop", a.conv.stop, "stop string (repeatable)")->allow_extra_args(false);
  app.add_option("-s,--seed", sc.seed, "sampling seed (per-reply seeds derive from it)")
      ->capture_default_str();
  app.add_option("-t,--threads", a.n_threads, "CPU threads")->capture_default_str();
  add_kv_flags(app, a.kv);
  app.add_option("-c,--n-ctx", a.n_ctx, "context size (KV cells) of the whole conversation")
      ->capture_default_str();
  app.add_option("--temp", sc.temp, "temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", sc.top_k, "top-k; 0 disables")->capture_default_str();
  app.add_option("--top-p", sc.top_p, "top-p; 1 disables")->capture_default_str();
  app.add_option("--min-p", sc.min_p, "min-p; 0 disables")->capture_default_str();
  app.add_option("--repeat-penalty", sc.repeat_penalty, "repeat penalty; 1 disables")
      ->capture_default_str();
  app.add_option("--frequency-penalty", sc.frequency_penalty, "frequency penalty")
      ->capture_default_str();
  app.add_option("--presence-penalty", sc.presence_penalty, "presence penalty")
      ->capture_default_str();
  app.add_flag("--greedy", a.greedy, "greedy decoding (same as --temp 0)");
}

constexpr const char* kHelp =
    "commands:\n"
    "  /help          this list\n"
    "  /regen [N]     drop the last reply and generate it again (N: replay draw N; 0 = the\n"
    "                 original reply)\n"
    "  /clear         forget the conversation (the system prompt stays)\n"
    "  /exit, /quit   end the session (so does Ctrl-D); Ctrl-C stops a reply\n";

// SIGINT stops the reply in progress; the handler only touches an atomic flag.
chat::Conversation* g_conversation = nullptr;
volatile std::sig_atomic_t g_sigint = 0;
extern "C" void on_sigint(int) {
  g_sigint = 1;
  if (g_conversation != nullptr) g_conversation->interrupt();
}

// One line of input; nullopt at end of input. libedit when stdin is a terminal.
std::optional<std::string> read_line(bool tty) {
  if (tty) {
    for (;;) {
      g_sigint = 0;
      char* line = readline("> ");
      if (line == nullptr) {
        if (g_sigint) {  // Ctrl-C at the prompt: a fresh prompt, not an exit
          std::fputc('\n', stdout);
          continue;
        }
        return std::nullopt;
      }
      std::string s(line);
      std::free(line);
      if (!s.empty()) add_history(s.c_str());
      return s;
    }
  }
  std::string s;
  if (!std::getline(std::cin, s)) return std::nullopt;
  return s;
}

void report(const chat::TurnStats& s) {
  fmt::print(stderr,
             "[turn {}{}] prefill {} tokens ({} reused) in {:.3f} s ({:.1f} tok/s), generated {} "
             "tokens in {:.3f} s ({:.1f} tok/s), {}\n",
             s.turn, s.regen ? fmt::format(" regen {}", s.attempt) : "", s.n_prefilled, s.n_reused,
             s.prefill_s, rate(s.n_prefilled, s.prefill_s), s.n_generated, s.decode_s,
             rate(s.n_generated, s.decode_s), chat::reply_end_name(s.end));
  if (s.n_dropped_turns > 0) {
    fmt::print(stderr,
               "[turn {}] context full: dropped the oldest {} turn(s), system prompt kept\n",
               s.turn, s.n_dropped_turns);
  }
  if (s.n_rewound > 0 && s.n_dropped_turns == 0) {
    fmt::print(stderr,
               "[turn {}] the template render differs from the KV after token {}: {} token(s) "
               "rewound and re-prefilled\n",
               s.turn, s.n_reused, s.n_rewound);
  }
}

}  // namespace

int run_chat(const std::vector<std::string>& args) {
  CLI::App app{"minfer: interactive conversation", "minfer MODEL --cnv"};
  ChatArgs a;
  add_flags(app, a);
  try {
    std::vector<std::string> rev(args.rbegin(), args.rend());
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (a.no_template) {
    return fail("--cnv needs the chat template; --no-template is refused in conversation mode");
  }
  sample::SamplerConfig& sc = a.conv.sampler;
  if (a.greedy) sc.temp = 0.0f;
  if (a.n_threads < 1) return fail(fmt::format("--threads {} must be >= 1", a.n_threads));
  if (auto st = sc.validate(); !st.ok()) return fail(st.error().message);
  std::string model_arg = a.model_opt;
  size_t next = 0;
  if (model_arg.empty()) {
    if (a.positionals.empty()) return fail("no model given (minfer MODEL --cnv)");
    model_arg = a.positionals[next++];
  }
  std::optional<std::string> first;
  if (next < a.positionals.size()) first = a.positionals[next++];

  std::string template_source;
  if (!a.template_file.empty()) {
    std::ifstream f(a.template_file, std::ios::binary);
    if (!f) return fail("cannot open '" + a.template_file + "'");
    template_source.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }

  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  fmt::print(stderr, "Loading model: {}\n", *path);
  auto options = engine_options(a.n_threads, a.kv);
  if (!options) return fail(options.error().message);
  auto eng = engine::Engine::open(*path, *options);
  if (!eng) return fail(eng.error().message);
  engine::Engine& e = **eng;
  if (!e.has_tokenizer()) return fail("the model has no tokenizer metadata (tokenizer.ggml.*)");
  chat::RendererChoice choice = chat::renderer_for(e.tokenizer(), template_source);
  if (choice.fallback) {
    fmt::print(stderr,
               "Notice: this GGUF has no tokenizer.chat_template; using the generic ChatML "
               "renderer\n");
  }
  if (auto st = chat::validate_renderer(*choice.renderer); !st.ok()) {
    return fail(st.error().message);
  }
  const uint32_t ctx = e.context_for(a.n_ctx, 0);
  if (auto st = e.set_n_ctx(ctx); !st.ok()) return fail(st.error().message);
  a.conv.system = a.system;
  auto conv_or = chat::Conversation::create(e, *choice.renderer, a.conv);
  if (!conv_or) return fail(conv_or.error().message);
  chat::Conversation& conv = **conv_or;
  fmt::print(stderr, "{} — n_ctx {}, threads {}; /help for commands\n",
             model::describe(e.hparams()), ctx, e.n_threads());

  if (!a.session.empty() && std::filesystem::exists(a.session)) {
    auto info = conv.load(a.session);
    if (!info) return fail(info.error().message);
    fmt::print(stderr,
               "[session] resumed {} message(s) and {} KV row(s) from {} — 0 tokens "
               "prefilled\n",
               info->n_messages, info->n_kv_tokens, a.session);
    if (!a.system.empty() && (conv.messages().empty() || conv.messages()[0].content != a.system)) {
      fmt::print(stderr, "[session] note: --system ignored; the session keeps its own\n");
    }
  }

  g_conversation = &conv;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns, the loop re-prompts
  sigaction(SIGINT, &sa, nullptr);

  const bool tty = isatty(fileno(stdin)) != 0;
  if (tty) {
    using_history();
  }
  auto sink = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  int exit_code = 0;
  for (;;) {
    std::optional<std::string> line = first ? first : read_line(tty);
    first.reset();
    if (!line) break;
    const std::string& in = *line;
    if (in.empty()) continue;
    Result<chat::TurnStats> r = make_error("");
    if (in[0] == '/') {
      const std::string cmd = in.substr(0, in.find(' '));
      if (cmd == "/exit" || cmd == "/quit") break;
      if (cmd == "/help") {
        std::fputs(kHelp, stdout);
        continue;
      }
      if (cmd == "/clear") {
        conv.clear();
        std::fputs("[history cleared]\n", stdout);
        continue;
      }
      if (cmd == "/regen") {
        int32_t attempt = -1;
        if (in.size() > cmd.size()) {
          try {
            attempt = std::stoi(in.substr(cmd.size() + 1));
          } catch (const std::exception&) {
            fmt::print(stderr, "usage: /regen [N]\n");
            continue;
          }
        }
        r = conv.regen(sink, attempt);
      } else {
        fmt::print(stderr, "unknown command '{}' — try /help\n", cmd);
        continue;
      }
    } else {
      r = conv.user_turn(in, sink);
    }
    if (!r) {
      fmt::print(stderr, "error: {}\n", r.error().message);
      continue;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    report(*r);
    if (r->end == chat::ReplyEnd::kInterrupted) fmt::print(stderr, "[reply stopped]\n");
  }
  g_conversation = nullptr;
  if (!a.session.empty()) {
    if (auto st = conv.save(a.session); !st.ok()) {
      fmt::print(stderr, "minfer: error: {}\n", st.error().message);
      exit_code = 1;
    } else {
      fmt::print(stderr, "[session] saved {} message(s) and {} KV row(s) to {}\n",
                 conv.messages().size(), conv.cursor(), a.session);
    }
  }
  fmt::print(stderr, "conversation ended after {} turn(s)\n", conv.n_turns());
  return exit_code;
}

}  // namespace minfer::cli
