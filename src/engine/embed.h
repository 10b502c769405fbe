// Stage 15 (the loop): sentence embeddings from an encoder (bert) — several inputs per
// Context::decode as separate sequences, pooled and normalised on the host.
// Invariants: an input's vector depends on its tokens alone — bit-identical whatever
// else shares its batch, the batch size and the thread count (invariant 8: the rows are
// batch invariant, and pooling/normalisation reduce one sequence in a fixed order);
// no KV survives a call (every sequence is removed, on success and on error).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace minfer::engine {

// llama.cpp's pooling types (enum llama_pooling_type; the GGUF's <arch>.pooling_type).
enum class Pooling : int32_t { kModel = -1, kNone = 0, kMean = 1, kCls = 2, kLast = 3, kRank = 4 };
// "none" | "mean" | "cls" | "last" | "rank"; error names the value and the choices.
Result<Pooling> parse_pooling(std::string_view name);
std::string_view pooling_name(Pooling p);

struct EmbedOptions {
  // kModel: the model's pooling_type; when absent, rank for a cross-encoder, else mean.
  Pooling pooling = Pooling::kModel;
  // llama.cpp's --embd-normalize: -1 none, 0 max-abs scaled to int16 range, 1 taxicab,
  // 2 euclidean (default), p > 2 p-norm.
  int32_t normalize = 2;
};

// What one call produced: per input, `rows` vectors of `dim` floats (rows = 1 when
// pooled; the input's token count with pooling none).
struct Embeddings {
  Pooling pooling = Pooling::kMean;
  int32_t dim = 0;
  std::vector<std::vector<float>> vectors;  // per input: rows × dim, row-major
  std::vector<int32_t> n_tokens;            // per input
};

// One (query, document) pair for a cross-encoder: the ids and each id's token type.
struct RankInput {
  std::vector<TokenId> tokens;
  std::vector<int32_t> types;  // 0 for the query part, 1 for the document part
};

// The pair as the vocabulary's own template encodes it: the query with its special
// tokens ([CLS] query [SEP] for BERT), then the document closed as a single text is
// ([SEP]): transformers' "[CLS] $A [SEP] $B [SEP]" with token types 0 up to the first
// [SEP] and 1 after. For the GGUFs llama.cpp's converter writes (add_bos, add_eos) the
// ids are those of llama.cpp's format_prompt_rerank; llama.cpp reads no token types
// (every row is segment 0), so its scores differ from transformers' — we follow
// transformers. Errors: the tokenizer's.
Result<RankInput> rank_pair(const tokenizer::Tokenizer& tok, std::string_view query,
                            std::string_view document);

// The pooling an EmbedOptions resolves to for this model (kModel → the file's type).
Pooling resolve_pooling(const Context& ctx, Pooling requested);

// Embeds each input (token ids, special tokens already added) in order. Inputs are
// packed in order into batches of at most ctx.n_ctx() tokens and ctx n_seq_max
// sequences. Rank pooling (a cross-encoder) returns each input's n_cls_out scores from
// its first ([CLS]) row, unnormalised; `token_types`, when not empty, gives each input's
// per-token types (same lengths as `inputs`), else every token is type 0. Errors (no
// vector returned, no KV left): the model is not an encoder, an empty input, an input
// longer than n_ctx_seq (named by index), token types that do not match the inputs,
// rank pooling on a model without a classification head, any other pooling on one
// with it, a decode error.
Result<Embeddings> embed(Context& ctx, std::span<const std::vector<TokenId>> inputs,
                         const EmbedOptions& options = {},
                         std::span<const std::vector<int32_t>> token_types = {});

// llama.cpp's common_embd_normalize semantics on one vector (see EmbedOptions).
void normalize_embedding(std::span<float> v, int32_t mode);

}  // namespace minfer::engine
