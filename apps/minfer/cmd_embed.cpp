// Stage 18 (CLI): `minfer embed MODEL [TEXT...] [-p TEXT] [-f FILE] [flags]` — sentence
// embeddings from an encoder model, with llama-embedding's inputs and output formats:
// each TEXT positional is one input; -p and -f texts are split at --embd-separator
// ("\n"). Default output: "embedding N: ..." lines (the whole vector for one input, the
// first 16 values for several) and the cosine similarity matrix; --embd-output-format
// json | json+ | array | raw prints every value.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine/embed.h"
#include "engine_flags.h"
#include "files.h"
#include "kv/cells.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

std::vector<std::string> split_at(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t next = sep.empty() ? std::string::npos : s.find(sep, at);
    out.push_back(s.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) break;
    at = next + sep.size();
  }
  // A trailing separator ends the last input; it does not start an empty one.
  if (out.size() > 1 && out.back().empty()) out.pop_back();
  return out;
}

float cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa == 0.0 || bb == 0.0) return (aa == 0.0 && bb == 0.0) ? 1.0f : 0.0f;
  return static_cast<float>(ab / std::sqrt(aa * bb));
}

// Unescapes \n, \t, \\ in --embd-separator (llama.cpp's flag takes them escaped).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

int run_embed(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer embed MODEL [TEXT...] [flags]\n"
      "sentence embeddings from an encoder model (bert): each TEXT is one input; -p and -f\n"
      "texts are split at --embd-separator. Output as llama-embedding's. A cross-encoder\n"
      "(pooling rank) scores each input QUERY<cls-separator>DOCUMENT");
  std::string model_opt, file, prompt, format, sep = "\\n", pooling_name = "model";
  std::string cls_sep = "\\t";
  int32_t n_threads = 0, n_ctx = 0, n_batch = 2048, normalize = 2;
  KvFlags kv;
  p.string_opt("-m,--model", "PATH", "GGUF file (then every positional is a TEXT)", model_opt);
  p.string_opt("-p,--prompt", "TEXT", "inputs, split at --embd-separator", prompt);
  p.string_opt("-f,--file", "PATH", "read inputs from this file, split at --embd-separator", file);
  p.string_opt("--embd-separator", "SEP", "separator of the -p / -f inputs (\\n)", sep);
  p.string_opt("--pooling", "P",
               "none | mean | cls | last | rank (default: the model's, bert.pooling_type; rank\n"
               "for a cross-encoder without one)",
               pooling_name);
  p.string_opt("--cls-separator", "SEP",
               "pooling rank: separator of an input's query and document (\\t)", cls_sep);
  p.int_opt("--embd-normalize", "N",
            "-1 none, 0 max-abs to int16 range, 1 taxicab, 2 euclidean (default), >2 p-norm",
            normalize, -1, 1 << 20);
  p.string_opt("--embd-output-format", "F",
               "json | json+ (with the cosine matrix) | array | raw (default: text lines)", format);
  p.int_opt("-c,--ctx-size", "N", "tokens one input may have (the model's context_length)", n_ctx,
            1, 1 << 20);
  p.int_opt("-b,--batch-size", "N", "tokens per decode; inputs are packed up to it (2048)", n_batch,
            1, 1 << 22);
  p.int_opt("-t,--threads", "N", "CPU threads, the caller included (all cores)", n_threads, 1,
            4096);
  add_kv_flags(p, kv);
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  if (auto n = ngl_notice(kv)) fmt::print(stderr, "notice: {}\n", *n);

  std::vector<std::string> texts = parsed.positionals;
  std::string model_arg = model_opt;
  if (model_arg.empty()) {
    if (texts.empty()) return fail("embed: no model given (minfer embed MODEL TEXT...)");
    model_arg = texts.front();
    texts.erase(texts.begin());
  }
  if (format != "" && format != "json" && format != "json+" && format != "array" &&
      format != "raw") {
    return fail("embed: unknown --embd-output-format '" + format +
                "' (choose json, json+, array or raw)");
  }
  engine::Pooling pooling = engine::Pooling::kModel;
  if (pooling_name != "model") {
    auto pp = engine::parse_pooling(pooling_name);
    if (!pp) return fail("embed: " + pp.error().message);
    pooling = *pp;
  }
  const std::string separator = unescape(sep);
  if (!prompt.empty()) {
    for (auto& t : split_at(prompt, separator)) texts.push_back(std::move(t));
  }
  if (!file.empty()) {
    auto content = read_input_file(file);
    if (!content) return fail(content.error().message);
    for (auto& t : split_at(*content, separator)) texts.push_back(std::move(t));
  }
  if (texts.empty()) return fail("embed: no input given (TEXT, -p or -f)");

  auto options = engine_options(n_threads, kv);
  if (!options) return fail(options.error().message);
  auto path = resolve_model_path(model_arg);
  if (!path) return fail(path.error().message);
  auto eng = open_engine(*path, *options);
  if (!eng) return fail(eng.error().message);
  engine::Engine& e = **eng;
  if (!e.hparams().embeddings_out) {
    return fail(fmt::format(
        "embed: '{}' is a generative model ({}), not an embedding model; use an encoder such "
        "as all-MiniLM-L6-v2",
        model_arg, e.hparams().arch));
  }
  if (!e.has_tokenizer()) return fail("embed: the model has no tokenizer");
  const auto ctx_seq = static_cast<uint32_t>(n_ctx > 0 ? n_ctx : e.hparams().n_ctx_train);
  if (ctx_seq > e.hparams().n_ctx_train) {
    return fail(fmt::format("embed: -c {} is beyond the model's context_length {}", ctx_seq,
                            e.hparams().n_ctx_train));
  }
  const bool rank = engine::resolve_pooling(e, pooling) == engine::Pooling::kRank;
  const std::string pair_sep = unescape(cls_sep);
  if (rank && pair_sep.empty()) return fail("embed: --cls-separator is empty");
  std::vector<std::vector<engine::TokenId>> inputs;
  std::vector<std::vector<int32_t>> types;
  for (size_t i = 0; i < texts.size(); ++i) {
    const size_t at = rank ? texts[i].find(pair_sep) : std::string::npos;
    if (at != std::string::npos) {
      // llama-embedding's QUERY<sep>DOCUMENT; with token types (engine::rank_pair).
      const std::string_view t(texts[i]);
      if (t.find(pair_sep, at + pair_sep.size()) != std::string_view::npos) {
        return fail(fmt::format("embed: input {} has more than one --cls-separator", i));
      }
      auto pr = engine::rank_pair(e.tokenizer(), t.substr(0, at), t.substr(at + pair_sep.size()));
      if (!pr) return fail(pr.error().message);
      inputs.push_back(std::move(pr->tokens));
      types.push_back(std::move(pr->types));
    } else {
      auto ids = e.tokenizer().encode(texts[i], {.add_special = true, .parse_special = false});
      if (!ids) return fail(ids.error().message);
      types.emplace_back(ids->size(), 0);
      inputs.push_back(std::move(*ids));
    }
    if (inputs.back().size() > ctx_seq) {
      return fail(fmt::format("embed: input {} has {} tokens, more than the context of {} (-c)", i,
                              inputs.back().size(), ctx_seq));
    }
  }
  const uint32_t n_seq = std::min<uint32_t>(static_cast<uint32_t>(inputs.size()), kv::kMaxSeqs);
  const uint32_t cells = std::max<uint32_t>(static_cast<uint32_t>(n_batch), ctx_seq);
  if (Status st = e.set_context({.n_cells = cells, .n_seq_max = n_seq, .n_ctx_seq = ctx_seq});
      !st.ok()) {
    return fail(st.error().message);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto r = engine::embed(e, inputs, {.pooling = pooling, .normalize = normalize}, types);
  if (!r) return fail(r.error().message);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t n_tokens = 0;
  for (const auto& in : inputs) n_tokens += in.size();
  fmt::print(stderr,
             "embed: {} input(s), {} tokens in {:.2f} ms: {:.2f} inputs/s, {:.1f} tokens/s\n",
             inputs.size(), n_tokens, secs * 1e3, static_cast<double>(inputs.size()) / secs,
             static_cast<double>(n_tokens) / secs);

  // One row per vector: per input, or per token with pooling none.
  std::vector<const float*> rows;
  const auto dim = static_cast<size_t>(r->dim);
  for (const auto& v : r->vectors) {
    for (size_t at = 0; at < v.size(); at += dim) rows.push_back(v.data() + at);
  }
  // Scores print round-trip exact ({:.9g}): they are compared and sorted, not read.
  const char* num = rank ? "{:.9g}" : normalize == 0 ? "{:.0f}" : "{:.7f}";
  std::string out;
  if (format.empty()) {
    out += "\n";
    if (rank) {  // llama-embedding's lines: one per score, the label when several
      const std::vector<std::string>& labels = e.hparams().cls_labels;
      for (size_t j = 0; j < rows.size(); ++j) {
        for (size_t i = 0; i < dim; ++i) {
          if (dim == 1) {
            out += fmt::format("rerank score {}: {:8.3f}\n", j, rows[j][i]);
          } else {
            out += fmt::format(
                "rerank score {}: {:8.3f} [{}]\n", j, rows[j][i],
                i < labels.size() && !labels[i].empty() ? labels[i] : std::to_string(i));
          }
        }
      }
    } else if (r->pooling == engine::Pooling::kNone) {
      for (size_t j = 0; j < rows.size(); ++j) {
        out += fmt::format("embedding {}: ", j);
        for (size_t i = 0; i < std::min<size_t>(3, dim); ++i) {
          out += fmt::format(fmt::runtime(normalize == 0 ? "{:6.0f} " : "{:9.6f} "), rows[j][i]);
        }
        out += " ... ";
        for (size_t i = dim - std::min<size_t>(3, dim); i < dim; ++i) {
          out += fmt::format(fmt::runtime(normalize == 0 ? "{:6.0f} " : "{:9.6f} "), rows[j][i]);
        }
        out += "\n";
      }
    } else {
      const size_t shown = rows.size() > 1 ? std::min<size_t>(16, dim) : dim;
      for (size_t j = 0; j < rows.size(); ++j) {
        out += fmt::format("embedding {}: ", j);
        for (size_t i = 0; i < shown; ++i) {
          out += fmt::format(fmt::runtime(normalize == 0 ? "{:6.0f} " : "{:9.6f} "), rows[j][i]);
        }
        out += "\n";
      }
      if (rows.size() > 1) {
        out += "\ncosine similarity matrix:\n\n";
        for (const std::string& t : texts) out += fmt::format("{:>6.6} ", t);
        out += "\n";
        for (size_t i = 0; i < rows.size(); ++i) {
          for (size_t j = 0; j < rows.size(); ++j) {
            out += fmt::format("{:6.2f} ", cosine(rows[i], rows[j], dim));
          }
          out += fmt::format("{:.10}\n", texts[i]);
        }
      }
    }
  } else if (format == "raw") {
    for (const float* row : rows) {
      for (size_t i = 0; i < dim; ++i) {
        out += fmt::format(fmt::runtime(num), row[i]);
        out += i + 1 < dim ? " " : "\n";
      }
    }
  } else {
    const bool object = format != "array";
    out += object ? "{\n  \"object\": \"list\",\n  \"data\": [\n" : "[";
    for (size_t j = 0; j < rows.size(); ++j) {
      if (object) {
        out += fmt::format(
            "    {{\n      \"object\": \"embedding\",\n      \"index\": {},\n"
            "      \"embedding\": ",
            j);
      }
      out += "[";
      for (size_t i = 0; i < dim; ++i) {
        out += fmt::format(fmt::runtime(num), rows[j][i]);
        if (i + 1 < dim) out += ",";
      }
      out += object ? "]\n    }" : "]";
      if (j + 1 < rows.size()) out += object ? ",\n" : ",";
    }
    out += object ? "\n  ]" : "]\n";
    if (format == "json+" && rows.size() > 1) {
      out += ",\n  \"cosineSimilarity\": [\n";
      for (size_t i = 0; i < rows.size(); ++i) {
        out += "    [";
        for (size_t j = 0; j < rows.size(); ++j) {
          out += fmt::format("{:6.2f}", cosine(rows[i], rows[j], dim));
          if (j + 1 < rows.size()) out += ", ";
        }
        out += i + 1 < rows.size() ? " ],\n" : " ]";
      }
      out += "\n  ]";
    }
    if (object) out += "\n}\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace minfer::cli
