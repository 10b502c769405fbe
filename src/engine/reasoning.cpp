// Stage 15 (the loop): the thinking block split from the answer (engine/reasoning.h).
#include "engine/reasoning.h"

#include <algorithm>

namespace minfer::engine {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  const size_t max = std::min(s.size(), tag.size() - 1);
  for (size_t n = max; n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ThinkSplitter::ThinkSplitter(bool forced_open, std::string open, std::string close)
    : forced_open_(forced_open), open_(std::move(open)), close_(std::move(close)) {
  reset();
}

void ThinkSplitter::reset() {
  phase_ = forced_open_ ? Phase::kThinking : Phase::kStart;
  held_.clear();
  ws_.clear();
  reasoning_begun_ = false;
  content_begun_ = false;
  after_block_ = false;
}

void ThinkSplitter::feed(std::string_view bytes, std::string& reasoning, std::string& content) {
  if (phase_ == Phase::kStart) {
    held_.append(bytes);
    const size_t first = held_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return;  // whitespace only: undecided
    const std::string_view rest = std::string_view(held_).substr(first);
    if (rest.size() < open_.size() && open_.compare(0, rest.size(), rest) == 0) return;
    if (rest.substr(0, open_.size()) != open_) {
      // No block: the whole text is the answer, as it came.
      phase_ = Phase::kContent;
      content.append(held_);
      held_.clear();
      return;
    }
    phase_ = Phase::kThinking;
    const std::string after(rest.substr(open_.size()));
    held_.clear();
    feed(after, reasoning, content);
    return;
  }
  if (phase_ == Phase::kContent) {
    if (after_block_ && !content_begun_) {
      const size_t first = bytes.find_first_not_of(" \t\r\n");
      if (first == std::string_view::npos) return;
      bytes.remove_prefix(first);
      content_begun_ = true;
    }
    content.append(bytes);
    return;
  }
  // kThinking: look for the close tag in the held bytes and the new ones.
  held_.append(bytes);
  const size_t close_at = held_.find(close_);
  const size_t emit_n =
      close_at != std::string::npos ? close_at : held_.size() - partial_tag_suffix(held_, close_);
  for (size_t i = 0; i < emit_n; ++i) {
    const char c = held_[i];
    if (is_space(c)) {
      if (reasoning_begun_) ws_.push_back(c);  // leading whitespace is dropped
      continue;
    }
    reasoning.append(ws_);
    ws_.clear();
    reasoning.push_back(c);
    reasoning_begun_ = true;
  }
  if (close_at == std::string::npos) {
    held_.erase(0, emit_n);
    return;
  }
  // The block ends: trailing whitespace of the reasoning is dropped, the rest is answer.
  const std::string after = held_.substr(close_at + close_.size());
  held_.clear();
  ws_.clear();
  phase_ = Phase::kContent;
  after_block_ = true;
  feed(after, reasoning, content);
}

void ThinkSplitter::flush(std::string& reasoning, std::string& content) {
  if (phase_ == Phase::kStart) {
    content.append(held_);
  } else if (phase_ == Phase::kThinking) {
    for (char c : held_) {
      if (is_space(c)) {
        if (reasoning_begun_) ws_.push_back(c);
        continue;
      }
      reasoning.append(ws_);
      ws_.clear();
      reasoning.push_back(c);
      reasoning_begun_ = true;
    }
  }
  held_.clear();
  ws_.clear();
}

std::optional<bool> reasoning_split_for(std::string_view format) {
  if (format == "none") return false;
  if (format == "deepseek" || format == "auto") return true;
  return std::nullopt;
}

}  // namespace minfer::engine
