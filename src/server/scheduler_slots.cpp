// Stage 17 (HTTP): the scheduler's slot commands (list, erase, save, restore of a slot's
// cached prefix), run by the inference thread between steps.
#include <fmt/format.h>

#include "chat/session_file.h"
#include "server/scheduler.h"

namespace minfer::server {

// The file: the session format's state {"slot_tokens": [ids]} and the KV rows of those
// positions; written to a temporary file renamed over the target (write_session).
void Scheduler::save_slot(Slot& s, const std::string& path, SlotCommand::Reply& reply) {
  chat::SessionData d;
  d.model_hash = chat::model_hash(engine_.file());
  const std::vector<engine::TokenId> tokens(s.tokens.begin(),
                                            s.tokens.begin() + static_cast<ptrdiff_t>(s.n_past));
  d.state = {{"slot_tokens", tokens}};
  d.n_kv_tokens = tokens.size();
  if (!tokens.empty()) {
    d.kv_token_bytes = engine_.kv_token_bytes();
    d.kv_format = engine_.kv_format();
    d.kv_rotated = engine_.kv_rotated();
    auto kv = engine_.kv_export_seq(s.seq, static_cast<uint32_t>(tokens.size()));
    if (!kv.ok()) {
      reply.status = 500;
      reply.error = "cannot read the slot's KV: " + kv.error().message;
      return;
    }
    d.kv = std::move(*kv);
  }
  if (Status st = chat::write_session(path, d); !st.ok()) {
    reply.status = 500;
    reply.error = st.error().message;
    return;
  }
  reply.n_tokens = static_cast<uint32_t>(tokens.size());
}

void Scheduler::restore_slot(Slot& s, const std::string& path, SlotCommand::Reply& reply) {
  auto fail = [&](std::string message) {
    reply.status = 400;
    reply.error = std::move(message);
  };
  auto d = chat::read_session(path);
  if (!d.ok()) return fail(d.error().message);
  const uint64_t want = chat::model_hash(engine_.file());
  if (d->model_hash != want) {
    return fail(fmt::format("'{}' was saved for another model (hash {:016x}, this model {:016x})",
                            path, d->model_hash, want));
  }
  std::vector<engine::TokenId> tokens;
  const auto* t =
      d->state.is_object() && d->state.contains("slot_tokens") ? &d->state["slot_tokens"] : nullptr;
  if (t == nullptr || !t->is_array()) {
    return fail(fmt::format("'{}' is not a slot file (no slot_tokens)", path));
  }
  for (const auto& id : *t) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= engine_.tokenizer().n_vocab()) {
      return fail(fmt::format("'{}': a token id outside the vocabulary", path));
    }
    tokens.push_back(id.get<engine::TokenId>());
  }
  if (tokens.size() != d->n_kv_tokens) {
    return fail(fmt::format("'{}': {} tokens but {} KV rows", path, tokens.size(), d->n_kv_tokens));
  }
  if (tokens.size() > options_.n_ctx) {
    return fail(fmt::format("'{}' holds {} tokens, more than n_ctx {} (--n-ctx)", path,
                            tokens.size(), options_.n_ctx));
  }
  if (Status st = chat::check_kv_format(fmt::format("'{}'", path), *d, engine_.kv_format(),
                                        engine_.kv_rotated());
      !st.ok()) {
    return fail(st.error().message);
  }
  // (0 before the first forward made the KV regions: kv_import_seq makes them and checks
  // the size then.)
  const uint64_t row_bytes = engine_.kv_token_bytes();
  if (!tokens.empty() && row_bytes != 0 && d->kv_token_bytes != row_bytes) {
    return fail(fmt::format("'{}': KV rows of {} bytes, this server's are {} (another cache type?)",
                            path, d->kv_token_bytes, row_bytes));
  }
  // The checks are done: the import frees the slot's cells only when it can place the rows.
  const bool was_idle = s.state == SlotState::kIdle;
  if (Status st = engine_.kv_import_seq(s.seq, static_cast<uint32_t>(tokens.size()), d->kv);
      !st.ok()) {
    empty_slot(s);
    reply.status = 400;
    reply.error = fmt::format("'{}' cannot be restored: {}", path, st.error().message);
    return;
  }
  if (was_idle) metrics_.slots_idle_cached.fetch_sub(1, std::memory_order_relaxed);
  s.tokens = std::move(tokens);
  s.n_past = s.tokens.size();
  s.state = s.n_past > 0 ? SlotState::kIdle : SlotState::kEmpty;
  s.last_used = ++tick_;
  if (s.state == SlotState::kIdle)
    metrics_.slots_idle_cached.fetch_add(1, std::memory_order_relaxed);
  reply.n_tokens = static_cast<uint32_t>(s.n_past);
}

void Scheduler::run_slot_command(SlotCommand& cmd) {
  SlotCommand::Reply reply;
  if (cmd.kind == SlotCommand::Kind::kList) {
    for (size_t i = 0; i < slots_.size(); ++i) reply.slots.push_back(slot_info(i));
  } else if (cmd.slot >= slots_.size()) {
    reply.status = 404;
    reply.error = fmt::format("no slot {} (the server has {} slots, 0..{})", cmd.slot,
                              slots_.size(), slots_.size() - 1);
  } else if (busy(slots_[cmd.slot])) {
    reply.status = 409;
    reply.error = fmt::format("slot {} is processing a request", cmd.slot);
  } else {
    Slot& s = slots_[cmd.slot];
    switch (cmd.kind) {
      case SlotCommand::Kind::kErase:
        reply.n_tokens = static_cast<uint32_t>(s.n_past);
        empty_slot(s);
        break;
      case SlotCommand::Kind::kSave:
        save_slot(s, cmd.path, reply);
        break;
      case SlotCommand::Kind::kRestore:
        restore_slot(s, cmd.path, reply);
        break;
      case SlotCommand::Kind::kList:
        break;
    }
    metrics_.kv_cells_used.store(engine_.kv_cells()->n_used(), std::memory_order_relaxed);
  }
  cmd.done.set_value(std::move(reply));
}

}  // namespace minfer::server
