// Stage 14 (logits → token): stop-string matching for the decode loop's stop gate.
// Invariants: matching is on bytes of the whole generated stream (a stop string split
// across tokens, or across a multi-byte character, is still found); empty stop strings
// never match; when several match, the earliest start wins.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace minfer::sample {

struct StopMatch {
  size_t stop_index = 0;  // which of the stop strings matched
  size_t start = 0;       // byte offset of the match in the stream: keep stream[0, start)
  size_t length = 0;      // bytes of the stop string, all of them generated
};

// Does `stream` (every byte generated so far) end with one of `stops`? The decode loop
// calls this after appending each token's bytes (ARCHITECTURE §2 inv. 5; llama.cpp's
// antiprompt check). Bytes already printed stay printed; the caller truncates its
// returned text at `start`. Earliest start wins, so with stops "bc" and "abc" over
// "xabc" the match is "abc" at 1.
std::optional<StopMatch> match_stop_suffix(std::string_view stream,
                                           std::span<const std::string> stops);

// Like match_stop_suffix, but also finds a stop string that ends inside the last
// `n_new` bytes (the token just appended) rather than exactly at the end — a token like
// "\n\nUser" carries bytes past the stop "\n\n". The match must overlap the new bytes
// (older matches were reported when they were new); earliest start wins.
std::optional<StopMatch> find_stop(std::string_view stream, size_t n_new,
                                   std::span<const std::string> stops);

// Length of the longest suffix of `stream` that is a proper prefix of some stop string:
// a streaming caller can hold these bytes back until the next token decides whether
// they begin a stop string (llama.cpp server's find_partial_stop_string).
size_t partial_stop_length(std::string_view stream, std::span<const std::string> stops);

}  // namespace minfer::sample
