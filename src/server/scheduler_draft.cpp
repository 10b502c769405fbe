// Stage 17 (HTTP): the scheduler's draft model — the draft context's KV caught up with
// each speculating slot's history, then its drafts, in forwards shared by every slot.
#include "server/scheduler.h"

namespace minfer::server {

Status Scheduler::draft_with_model() {
  engine::Context& d = *options_.spec.draft;
  kv::KvCells& kv = *d.kv_cells();
  const int32_t n_vocab = engine_.tokenizer().n_vocab();
  // What the draft KV holds of each history: the common prefix, less its last token at
  // least (its logits are gone), stays; the rest is removed and decoded again.
  for (Slot* s : drafting_) {
    s->draft_done = false;
    size_t keep = 0;
    const size_t common = std::min(s->draft_kv.size(), s->tokens.size());
    while (keep < common && s->draft_kv[keep] == s->tokens[keep]) ++keep;
    keep = std::min(keep, s->tokens.size() - 1);
    kv.seq_rm(s->seq, static_cast<kv::Pos>(keep), -1);
    s->draft_kv.resize(keep);
  }
  // A slot's pick from the draft's logits of its last row: the next draft token, or the
  // end of its draft.
  auto pick = [&](Slot* s, std::span<const float> logits) {
    const std::optional<engine::TokenId> id =
        engine::draft_token(logits, s->job.spec.p_min, n_vocab);
    if (!id) {
      s->draft_done = true;
      return;
    }
    s->draft.push_back(*id);
    // The last drafted token needs no forward; nothing follows an end of generation.
    if (static_cast<int32_t>(s->draft.size()) >= s->draft_want || engine_.tokenizer().is_eog(*id))
      s->draft_done = true;
  };
  // Catch-up, in chunks of step_tokens rows: each slot's last history row asks for logits.
  const size_t chunk = std::max<uint32_t>(options_.step_tokens, 1);
  auto run = [&]() -> Status {
    if (draft_batch_.empty()) return Ok{};
    if (draft_batch_.n_logits() == 0) {
      // A chunk in the middle of a history: decode() wants one logits row.
      engine::Batch& b = draft_batch_;
      const engine::BatchRow last = b.rows().back();
      std::vector<engine::BatchRow> rows(b.rows().begin(), b.rows().end() - 1);
      b.clear();
      for (const auto& r : rows) b.add(r.token, r.seq, r.pos, false);
      b.add(last.token, last.seq, last.pos, true);
      draft_rows_.back() = nullptr;
    }
    MINFER_TRY(const engine::BatchLogits logits, d.decode(draft_batch_));
    for (size_t r = 0; r < draft_rows_.size(); ++r) {
      if (draft_rows_[r] != nullptr) pick(draft_rows_[r], logits.row(r));
    }
    draft_batch_.clear();
    draft_rows_.clear();
    return Ok{};
  };
  draft_batch_.clear();
  draft_rows_.clear();
  for (Slot* s : drafting_) {
    for (size_t at = s->draft_kv.size(); at < s->tokens.size(); ++at) {
      const bool last = at + 1 == s->tokens.size();
      draft_batch_.add(s->tokens[at], s->seq, static_cast<int32_t>(at), last);
      draft_rows_.push_back(last ? s : nullptr);
      s->draft_kv.push_back(s->tokens[at]);
      if (draft_batch_.size() >= chunk) MINFER_TRY_STATUS(run());
    }
  }
  MINFER_TRY_STATUS(run());
  // Then one token per forward for every slot still drafting.
  for (;;) {
    for (Slot* s : drafting_) {
      if (s->draft_done) continue;
      const engine::TokenId id = s->draft.back();
      draft_batch_.add(id, s->seq, static_cast<int32_t>(s->draft_kv.size()), true);
      draft_rows_.push_back(s);
      s->draft_kv.push_back(id);
    }
    if (draft_batch_.empty()) return Ok{};
    MINFER_TRY_STATUS(run());
  }
}

}  // namespace minfer::server
