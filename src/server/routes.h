// Stage 17 (HTTP): what the route handlers share (internal to src/server).
// Invariant: handlers run on HTTP worker threads and reach the engine only through the
// scheduler (submit) and the immutable parts of the model (tokenizer, template).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chat/renderer.h"
#include "grammar/token_mask.h"
#include "server/api.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/tools.h"

namespace minfer::server {

// Finished Responses API responses kept for GET /v1/responses/{id} and
// previous_response_id (server/responses.cpp): at most `max`, the oldest evicted first;
// in memory only (a restart forgets them). Thread-safe.
class ResponseStore {
 public:
  struct Entry {
    json response;      // the response object as returned
    json conversation;  // OpenAI chat messages: every turn's input and output, no instructions
  };
  explicit ResponseStore(size_t max) : max_(max) {}
  void put(const std::string& id, json response, json conversation);  // max 0: keeps nothing
  std::optional<Entry> get(const std::string& id) const;
  bool erase(const std::string& id);  // false: no such id
  size_t size() const;

 private:
  size_t max_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::deque<std::string> order_;  // ids, oldest first
};

// The served model as Ollama's model routes describe it (server/ollama.cpp), read once
// at start (the header bytes are hashed for the digest).
struct ModelCard {
  std::string path;   // the (first) GGUF file
  uint64_t size = 0;  // bytes of every part
  std::string modified_at;
  std::string digest;  // XXH3-64 of the header and the size, 16 hex digits
  uint64_t n_params = 0;
  json details;  // format, family, parameter_size, quantization_level
};
std::shared_ptr<const ModelCard> build_model_card(const engine::Context& engine);

struct ServerContext {
  engine::Context& engine;
  const tokenizer::Tokenizer& tok;
  const chat::ChatRenderer& renderer;
  Scheduler& scheduler;
  Metrics& metrics;
  const ServerOptions& options;
  std::shared_ptr<const grammar::TokenVocab> vocab;  // token bytes trie for grammar masks
  int64_t created = 0;                               // server start, unix seconds
  // Completion streams whose response has not been written to its end (the drain waits
  // for them before it closes the HTTP server, which stops writing chunked bodies).
  std::atomic<int32_t>* open_streams = nullptr;
  ResponseStore* responses = nullptr;  // the Responses API's stored responses
  std::shared_ptr<const ModelCard> model_card;
};

// Per request, on its worker thread: what the one stderr log line reports.
struct RequestLog {
  std::chrono::steady_clock::time_point t0;
  int32_t n_prompt = -1;
  int32_t n_generated = -1;
  int32_t n_reused = -1;
  int status = -1;  // the status logged when not the response's: 499, the client left
  // The client's X-Request-Id (<= 128 visible ASCII characters), else a generated one:
  // echoed in the response header, logged, and the suffix of chatcmpl-/cmpl- ids.
  std::string request_id;
  http::ClientLink* client = nullptr;  // the client of the request being served
};
RequestLog& request_log();

void reply_json(http::Response& res, const json& body, int status = 200);
// The error in the route's dialect (OpenAI's; Anthropic's on /v1/messages*; Ollama's on
// /api/*).
void reply_error(http::Response& res, const ApiError& e, Dialect dialect = Dialect::kOpenAI);

// --- The request path every generating route shares (server/job.cpp) ---------------
// A dialect's route parses its body into a CompletionRequest; from there the prompt
// render, the sequence state, the scheduler and the event stream are one path.

// prefix + 24 random hex digits ("chatcmpl-", "msg_", "toolu_").
std::string random_id(const char* prefix);
// prefix + this request's id (RequestLog::request_id), or random_id(prefix) without one.
std::string request_scoped_id(const char* prefix);
// Only whitespace (content before a tool call that is only whitespace is not content).
bool blank(const std::string& s);

// The prompt's tokens: a chat request's messages (with its tools, in the template's
// tool `format`) rendered by the chat template, or the prompt text, tokenized; or the
// given ids. Errors are 400s. `reasoning` (chat): the template's thinking block as this
// request wants it (budget 0 closes the block in the prompt).
std::optional<ApiError> prompt_tokens(ServerContext& ctx, const CompletionRequest& r,
                                      ToolFormat format, std::vector<engine::TokenId>& out,
                                      engine::ReasoningOptions* reasoning = nullptr);

// The prompt text of a chat request: its messages (with its tools, in the template's
// tool `format`) rendered by the chat template. Errors are 400s.
std::optional<ApiError> render_chat_prompt(ServerContext& ctx, const CompletionRequest& r,
                                           ToolFormat format, std::string& out);

// A request taken by the scheduler.
struct SubmittedJob {
  std::shared_ptr<JobStream> stream;  // choice 0
  // Every choice's (the request's n; choices[0] is `stream`).
  std::vector<std::shared_ptr<JobStream>> choices;
  ToolFormat format = ToolFormat::kGeneric;  // the template's tool-call format
  int32_t n_prompt = 0;
};
// A queue's answer as the client sees it: nothing when queued, 429 when full (counted),
// 503 while the server drains.
std::optional<ApiError> submit_refusal(ServerContext& ctx, SubmitResult result);
// Tool grammar, prompt, grammar constraint and sequence state, then the scheduler: one
// job per choice (r.n, at most the server's slots), choice i seeded r's seed + i.
// An error (counted as rejected; a full queue is 429, a drain 503) means nothing runs.
std::optional<ApiError> submit_completion(ServerContext& ctx, CompletionRequest& r,
                                          SubmittedJob& out);

// OpenAI's finish_reason (Ollama's done_reason) of a sequence's stop: "stop" at the end of
// generation or a stop string, else "length".
const char* finish_reason(engine::SeqStop stop);
// The final event's token counts, for the request's log line.
void note_counts(const JobEvent& ev);
// Non-streaming: waits for the job's events, calling `on_event` for each, and returns
// the final one (its counts noted for the request log). A client that leaves meanwhile
// (looked for every 50 ms) cancels the job: the final event is then the cancellation's,
// logged as 499 with the tokens generated so far.
JobEvent collect_events(JobStream& stream, const std::function<void(const JobEvent&)>& on_event);

// A request's choices (one job each) read as one stream of events, each event's
// `choice` saying whose; the choices are taken in turn so none starves the others.
class ChoiceStreams {
 public:
  explicit ChoiceStreams(std::vector<std::shared_ptr<JobStream>> streams);
  size_t size() const { return streams_.size(); }
  bool done() const { return n_done_ == streams_.size(); }
  // The next event of a choice not yet finished, within `timeout`; false when none came.
  bool pop(JobEvent& ev, std::chrono::milliseconds timeout);
  void cancel();  // every choice
  // The finished choices' counts as one final event: the prompt once (choice 0's, and
  // its cached tokens), the completions' tokens summed; the first error, if any.
  JobEvent total() const;

 private:
  bool take(size_t i, JobEvent& ev, std::chrono::milliseconds timeout);
  std::vector<std::shared_ptr<JobStream>> streams_;
  std::vector<JobEvent> finals_;  // per choice: its final event (text dropped)
  std::vector<bool> finished_;
  size_t n_done_ = 0;
  size_t next_ = 0;
};
// collect_events for every choice: `on_event` sees each event (its `choice` set); the
// total (ChoiceStreams::total) is returned and noted for the request log.
JobEvent collect_choices(ChoiceStreams& choices,
                         const std::function<void(const JobEvent&)>& on_event);

// A streaming response's frames in one dialect.
class SseWriter {
 public:
  virtual ~SseWriter() = default;
  // Written before the first event.
  virtual std::string head() = 0;
  // The frames of one event; for the final event, everything up to the stream's end
  // (with several choices: each choice's final event, the last one ending the stream).
  virtual std::string frames(const JobEvent& ev) = 0;
};
// Streams the job's events through `writer` as a chunked body of `content_type`
// (server-sent events; Ollama's dialect writes NDJSON lines); a client that leaves
// cancels the job.
void reply_stream(ServerContext& ctx, http::Response& res, std::shared_ptr<JobStream> stream,
                  std::unique_ptr<SseWriter> writer,
                  const char* content_type = "text/event-stream");
// The same for every choice of a request, interleaved; a client that leaves cancels them
// all.
void reply_stream(ServerContext& ctx, http::Response& res,
                  std::vector<std::shared_ptr<JobStream>> streams,
                  std::unique_ptr<SseWriter> writer,
                  const char* content_type = "text/event-stream");

// POST /v1/chat/completions and /v1/completions (stream and not).
// `body`: the request body, read under --max-body.
void handle_completion(ServerContext& ctx, Endpoint endpoint, const std::string& body,
                       http::Response& res);

// Anthropic's Messages API (server/messages.cpp): POST /v1/messages (stream and not)
// and POST /v1/messages/count_tokens.
void handle_messages(ServerContext& ctx, const std::string& body, http::Response& res);
void handle_count_tokens(ServerContext& ctx, const std::string& body, http::Response& res);

// OpenAI's Responses API (server/responses.cpp): POST /v1/responses (stream and not),
// GET and DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel.
void handle_responses(ServerContext& ctx, const std::string& body, http::Response& res);
void handle_response_get(ServerContext& ctx, const std::string& id, http::Response& res);
void handle_response_delete(ServerContext& ctx, const std::string& id, http::Response& res);
void handle_response_cancel(ServerContext& ctx, const std::string& id, http::Response& res);

// Embeddings (server/embeddings.cpp), on an encoder model.
// 400 when the served model is a generative one (its routes for embeddings, and the
// generating routes on an encoder model, say why).
std::optional<ApiError> not_an_embedding_model(const ServerContext& ctx);
// The body as a JSON object and its optional `model` (a string; the served id when absent),
// for the embedding and rerank routes.
std::optional<ApiError> parse_with_model(const ServerContext& ctx, const std::string& body, json& j,
                                         std::string& model);
// An embedding request's `input` (a string, strings, token ids or arrays of them) as
// token lists, [CLS]/[SEP] added to texts as the vocabulary says; each within the
// server's n_ctx, or cut to it keeping its last token when `truncate`. 400s name the
// input by index (`name`[i]).
std::optional<ApiError> embed_inputs(ServerContext& ctx, const json* input, const char* name,
                                     bool truncate, std::vector<std::vector<engine::TokenId>>& out);
// Runs them on the inference thread: 429 queue full, 503 draining. `token_types`: per
// input (a cross-encoder's pairs), or empty.
std::optional<ApiError> run_embeddings(ServerContext& ctx,
                                       std::vector<std::vector<engine::TokenId>> inputs,
                                       const engine::EmbedOptions& options, engine::Embeddings& out,
                                       std::vector<std::vector<int32_t>> token_types = {});
// 400 when the served model is a cross-encoder (it scores pairs at /v1/rerank).
std::optional<ApiError> a_cross_encoder(const ServerContext& ctx);
// POST /v1/rerank, /rerank, /v1/reranking, /reranking (server/rerank.cpp): llama-server's
// (Jina's, Cohere's) shape; 400 on a model without a classification head.
void handle_rerank(ServerContext& ctx, const std::string& body, http::Response& res);
// POST /v1/embeddings (`openai`: OpenAI's shape) and llama-server's POST /embeddings.
void handle_embeddings(ServerContext& ctx, const std::string& body, http::Response& res,
                       bool openai);

// Ollama's API (server/ollama.cpp): POST /api/chat, /api/generate, /api/show; GET
// /api/tags, /api/ps, /api/version.
void handle_ollama_chat(ServerContext& ctx, const std::string& body, http::Response& res);
void handle_ollama_generate(ServerContext& ctx, const std::string& body, http::Response& res);
void handle_ollama_show(ServerContext& ctx, const std::string& body, http::Response& res);
void handle_ollama_tags(ServerContext& ctx, http::Response& res);
void handle_ollama_ps(ServerContext& ctx, http::Response& res);
void handle_ollama_version(ServerContext& ctx, http::Response& res);
// POST /api/embed (`legacy` false) and the older POST /api/embeddings ({prompt} →
// {embedding}).
void handle_ollama_embed(ServerContext& ctx, const std::string& body, http::Response& res,
                         bool legacy);

// Model, tokenizer, server and slot routes (server/info.cpp).
// POST /tokenize: llama-server's {"content", ...} → {"tokens"}, or vLLM's {"prompt", ...}
// / {"messages", ...} → {"count", "max_model_len", "tokens", "token_strs"?}; the shape is
// chosen by the fields present (a mix is a 400 naming them).
void handle_tokenize(ServerContext& ctx, const std::string& body, http::Response& res);
// POST /detokenize {"tokens"} → {"content", "prompt"} (llama-server's key and vLLM's).
void handle_detokenize(ServerContext& ctx, const std::string& body, http::Response& res);
// POST /v1/chat/completions/render: a chat request's prompt text and ids, nothing generated.
void handle_chat_render(ServerContext& ctx, const std::string& body, http::Response& res);
// GET /v1/models and GET /v1/models/{id} (404 for a name the server does not serve).
void handle_models(ServerContext& ctx, http::Response& res);
void handle_model_get(ServerContext& ctx, const std::string& id, http::Response& res);
// SGLang's GET /get_server_info (/server_info) and GET /get_model_info (/model_info).
void handle_server_info(ServerContext& ctx, http::Response& res);
void handle_model_info(ServerContext& ctx, http::Response& res);
// llama-server's GET /props, GET /slots, POST /slots/{id}?action=erase.
void handle_props(ServerContext& ctx, http::Response& res);
void handle_slots(ServerContext& ctx, http::Response& res);
void handle_slot_action(ServerContext& ctx, const std::string& id, const std::string& action,
                        const std::string& body, http::Response& res);

}  // namespace minfer::server
