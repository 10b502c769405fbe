// Stage 14 (logits → token): stop-string matching (see stop.h).
// Invariant: pure byte comparisons; no allocation.
#include "sample/stop.h"

#include <algorithm>

namespace minfer::sample {

namespace {

// Prefers the earliest start; on equal starts the lower stop index (deterministic).
void consider(std::optional<StopMatch>& best, size_t index, size_t start, size_t length) {
  if (!best || start < best->start) best = StopMatch{index, start, length};
}

}  // namespace

std::optional<StopMatch> match_stop_suffix(std::string_view stream,
                                           std::span<const std::string> stops) {
  std::optional<StopMatch> best;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    if (s.empty() || s.size() > stream.size()) continue;
    if (stream.ends_with(s)) consider(best, i, stream.size() - s.size(), s.size());
  }
  return best;
}

std::optional<StopMatch> find_stop(std::string_view stream, size_t n_new,
                                   std::span<const std::string> stops) {
  n_new = std::min(n_new, stream.size());
  const size_t new_begin = stream.size() - n_new;
  std::optional<StopMatch> best;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    if (s.empty() || s.size() > stream.size() || n_new == 0) continue;
    // A match overlapping the new bytes ends after new_begin, so it starts at or after
    // new_begin + 1 - s.size(); search from there.
    const size_t from = new_begin + 1 >= s.size() ? new_begin + 1 - s.size() : 0;
    const size_t pos = stream.find(s, from);
    if (pos != std::string_view::npos) consider(best, i, pos, s.size());
  }
  return best;
}

size_t partial_stop_length(std::string_view stream, std::span<const std::string> stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    const size_t max_len = std::min(stream.size(), s.empty() ? 0 : s.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (stream.substr(stream.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace minfer::sample
