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

namespace minfer::tokenizer::unicode {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for ASCII, stray
// continuation bytes and bytes >= 0xF8), the same table llama.cpp splits symbols by.
size_t utf8_seq_len(uint8_t lead);

// Code points of `text`. A byte that does not start a well-formed sequence (bad lead,
// missing or wrong continuation bytes, truncated at the end) becomes U+FFFD and
// decoding resumes at the next byte — llama.cpp's unicode_cpts_from_utf8.
std::vector<uint32_t> decode_utf8(std::string_view text);

// Appends the UTF-8 form of `cp`. Code points above 0x10FFFF (which the lenient
// decoder can produce from F5..F7 leads) are written with the 4-byte pattern.
void append_utf8(std::string& out, uint32_t cp);
std::string to_utf8(uint32_t cp);

// Unicode White_Space (PropList.txt): 0009..000D, 0020, 0085, 00A0, 1680, 2000..200A,
// 2028, 2029, 202F, 205F, 3000. This is the set llama.cpp's pre-tokenizers call
// whitespace; a test checks it against PCRE2's \p{White_Space} on every code point.
bool is_whitespace(uint32_t cp);

// GPT-2 byte-level mapping (openai/gpt-2 encoder.py bytes_to_unicode): printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
uint32_t byte_to_cp(uint8_t byte);
// Inverse of byte_to_cp; nullopt for code points outside the table.
std::optional<uint8_t> cp_to_byte(uint32_t cp);
// Appends the byte-level form of every byte of `bytes`.
void append_byte_encoded(std::string& out, std::string_view bytes);

// Number of bytes at the end of `bytes` that start a UTF-8 sequence still missing
// continuation bytes (0 when the text ends on a complete sequence or on bytes that
// can never complete one).
size_t incomplete_utf8_tail(std::string_view bytes);

}  // namespace minfer::tokenizer::unicode
