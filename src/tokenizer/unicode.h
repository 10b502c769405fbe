// Stage 4 (text → ids): UTF-8 and byte-level helpers shared by the tokenizers.
// Invariants: decoding follows llama.cpp's lenient rules (an invalid byte becomes one
// U+FFFD, overlong forms are accepted) so that ids match it on any input; the GPT-2
// byte table is a bijection between the 256 bytes and 256 code points.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

// (Encoding, lead lengths and incomplete tails are core/utf8.h's; this file keeps the
// tokenizer's own decoding policy and tables.)
namespace minfer::tokenizer::unicode {

using utf8::kReplacementChar;

// Code points of `text`. A byte that does not start a well-formed sequence (bad lead,
// missing or wrong continuation bytes, truncated at the end) becomes U+FFFD and
// decoding resumes at the next byte — llama.cpp's unicode_cpts_from_utf8.
std::vector<uint32_t> decode_utf8(std::string_view text);

// Unicode White_Space (PropList.txt): 0009..000D, 0020, 0085, 00A0, 1680, 2000..200A,
// 2028, 2029, 202F, 205F, 3000. This is the set llama.cpp's pre-tokenizers call
// whitespace; a test checks it against PCRE2's \p{White_Space} on every code point.
bool is_whitespace(uint32_t cp);

// General categories, decomposition and case (libutf8proc's tables). Code points
// outside 0..0x10FFFF count as unassigned (Cn).
// General category P* (Pc, Pd, Ps, Pe, Pi, Pf, Po).
bool is_punctuation(uint32_t cp);
// General category Cc, Cf, Cs or Co: the "other" characters that are not unassigned.
bool is_control_format_surrogate_private(uint32_t cp);
// General category Mn (the marks NFD splits off accented letters).
bool is_nonspacing_mark(uint32_t cp);
// Canonical decomposition (NFD) of `cps`: every code point fully decomposed, then each
// run of non-starters put in canonical order (stable sort by combining class).
std::vector<uint32_t> nfd(const std::vector<uint32_t>& cps);
// Appends the full lowercase mapping of `cp` without context (Rust's char::to_lowercase):
// the simple mapping, except U+0130 → U+0069 U+0307, the one unconditional
// multi-character lowercase of SpecialCasing.txt.
void append_lowercase(uint32_t cp, std::vector<uint32_t>& out);

// GPT-2 byte-level mapping (openai/gpt-2 encoder.py bytes_to_unicode): printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
uint32_t byte_to_cp(uint8_t byte);
// Inverse of byte_to_cp; nullopt for code points outside the table.
std::optional<uint8_t> cp_to_byte(uint32_t cp);
// Appends the byte-level form of every byte of `bytes`.
void append_byte_encoded(std::string& out, std::string_view bytes);

}  // namespace minfer::tokenizer::unicode
