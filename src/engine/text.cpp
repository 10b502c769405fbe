// Stage 15 (the loop): byte table, stop matcher and UTF-8-safe emitter (text.h).
#include "engine/text.h"

#include <algorithm>

#include "core/utf8.h"
#include "sample/stop.h"

namespace minfer::engine {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

TokenBytes::TokenBytes(const tokenizer::Tokenizer& tok) {
  ends_.reserve(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string b = tok.token_to_bytes(id, /*special=*/false);
    bytes_ += b;
    ends_.push_back(bytes_.size());
    max_len_ = std::max(max_len_, b.size());
  }
  bytes_.shrink_to_fit();
}

StopMatcher::StopMatcher(std::vector<std::string> stops, size_t max_feed)
    : stops_(std::move(stops)) {
  size_t max_stop = 0;
  for (const std::string& s : stops_) max_stop = std::max(max_stop, s.size());
  // held_ keeps fewer than max_stop bytes between feeds; a feed adds max_feed.
  held_.reserve(max_stop + max_feed + 1);
  out_.reserve(max_stop + max_feed + 1);
}

StopMatcher::Feed StopMatcher::feed(std::string_view bytes) {
  if (stopped_) return {.text = {}, .stopped = true};
  if (stops_.empty()) return {.text = bytes, .stopped = false};
  held_.append(bytes);
  // A stop string that starts before held_ would have left its start held (a started
  // match is a suffix that is a proper prefix of it), so searching held_ is enough.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) continue;
    const size_t at = held_.find(stops_[i]);
    if (at < best) {
      best = at;
      matched_ = static_cast<int32_t>(i);
    }
  }
  if (best != std::string::npos) {
    out_.assign(held_, 0, best);
    held_.clear();
    stopped_ = true;
    return {.text = out_, .stopped = true};
  }
  const size_t keep = sample::partial_stop_length(held_, stops_);
  out_.assign(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return {.text = out_, .stopped = false};
}

std::string_view StopMatcher::flush() {
  if (stopped_) return {};
  out_.assign(held_);
  held_.clear();
  return out_;
}

void StopMatcher::reset() {
  held_.clear();
  out_.clear();
  stopped_ = false;
  matched_ = -1;
}

Utf8Emitter::Utf8Emitter(TextSink sink) : sink_(std::move(sink)) {
  pending_.reserve(64);
  joined_.reserve(256);
  scratch_.reserve(256);
}

void Utf8Emitter::emit_checked(std::string_view bytes, bool final) {
  // Valid runs are copied as they are; invalid subparts become U+FFFD; an unfinished
  // tail stays in pending_ (or becomes U+FFFD when `final`). `bytes` never aliases
  // pending_ (feed and flush pass joined_).
  scratch_.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, run = 0, tail = bytes.size();
  while (i < bytes.size()) {
    size_t len = 0;
    uint32_t cp = 0;
    const utf8::Scan k = utf8::scan(p + i, bytes.size() - i, len, cp);
    if (k == utf8::Scan::kValid) {
      i += len;
      continue;
    }
    scratch_.append(bytes.substr(run, i - run));
    if (k == utf8::Scan::kTruncated) {
      if (final) {
        scratch_.append(kReplacement);
      } else {
        tail = i;
      }
      run = i = bytes.size();
      break;
    }
    scratch_.append(kReplacement);
    i += len;
    run = i;
  }
  scratch_.append(bytes.substr(run, i - run));
  pending_.assign(bytes.substr(tail));
  if (!scratch_.empty()) sink_(scratch_);
}

void Utf8Emitter::feed(std::string_view bytes) {
  if (bytes.empty()) return;
  if (pending_.empty()) {
    emit_checked(bytes, false);
    return;
  }
  joined_.assign(pending_);
  joined_.append(bytes);
  emit_checked(joined_, false);
}

void Utf8Emitter::flush() {
  if (pending_.empty()) return;
  joined_.assign(pending_);
  emit_checked(joined_, true);
}

}  // namespace minfer::engine
