// Stage 1 (core): UTF-8 — the one encoder and the one strict classifier every stage
// uses (the GGUF reader's string check, the emitter's U+FFFD repair, the tokenizer, the
// chat template engine and the grammar). A stage with its own policy for ill-formed
// input (the tokenizer's one-code-point-per-bad-byte decode, as llama.cpp does) builds
// it from these pieces; none re-implements the bit layout.
// Written here rather than taken from utfcpp/utf8proc: the strict classifier must report
// the maximal ill-formed subpart (Unicode Table 3-7, for U+FFFD repair) and a truncated
// tail separately, allocation-free, which neither library's API exposes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace minfer::utf8 {

inline constexpr uint32_t kReplacementChar = 0xFFFD;
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Appends the 1..4-byte encoding of `cp` (callers pass cp <= kMaxCodePoint; larger
// values are encoded from their low 21 bits).
void append(std::string& out, uint32_t cp);
std::string encode(uint32_t cp);

// The sequence length a lead byte announces, leniently (llama.cpp's utf8_len: by the
// high nibble, 1 for ASCII and for stray continuation bytes, 2 for C0..DF, 3 for
// E0..EF, 4 for F0..FF).
size_t lead_length(uint8_t lead);

bool is_continuation(uint8_t b);

// Strict classification of the sequence at p[0] (n >= 1 bytes available), per Unicode
// Table 3-7 (no overlongs, no surrogates, nothing past U+10FFFF).
enum class Scan : uint8_t {
  kValid,      // `len` = the sequence's length, `cp` its code point
  kTruncated,  // every byte present is a valid start of a longer sequence
  kInvalid,    // `len` = the maximal ill-formed subpart (>= 1)
};
Scan scan(const unsigned char* p, size_t n, size_t& len, uint32_t& cp);

// Every sequence of `s` is valid (strict).
bool is_valid(std::string_view s);

// Bytes at the end of `s` that begin a sequence not yet complete (0..3), for text that
// arrives in pieces.
size_t incomplete_tail(std::string_view s);

}  // namespace minfer::utf8
