// Stage 4 (text → ids): UTF-8 and GPT-2 byte-level helpers.
// Invariants: decode_utf8 never fails and yields exactly one code point per
// well-formed sequence or invalid byte; byte_to_cp / cp_to_byte are inverse.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>

#include "core/check.h"

namespace minfer::tokenizer::unicode {

namespace {
bool is_cont(uint8_t b) {
  return utf8::is_continuation(b);
}
}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    if ((b0 & 0x80) == 0) {
      out.push_back(b0);
      i += 1;
    } else if ((b0 & 0x40) == 0) {  // continuation byte where a lead was expected
      out.push_back(kReplacementChar);
      i += 1;
    } else if ((b0 & 0x20) == 0) {
      if (i + 1 < n && is_cont(s[i + 1])) {
        out.push_back((uint32_t(b0 & 0x1F) << 6) | (s[i + 1] & 0x3F));
        i += 2;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if ((b0 & 0x10) == 0) {
      if (i + 2 < n && is_cont(s[i + 1]) && is_cont(s[i + 2])) {
        out.push_back((uint32_t(b0 & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) |
                      (s[i + 2] & 0x3F));
        i += 3;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if ((b0 & 0x08) == 0) {
      if (i + 3 < n && is_cont(s[i + 1]) && is_cont(s[i + 2]) && is_cont(s[i + 3])) {
        out.push_back((uint32_t(b0 & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
                      (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F));
        i += 4;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else {  // 0xF8..0xFF never start a sequence
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
  return out;
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
  switch (cp) {
    case 0x0085:
    case 0x00A0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
utf8proc_category_t category(uint32_t cp) {
  if (cp > utf8::kMaxCodePoint) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
}  // namespace

bool is_punctuation(uint32_t cp) {
  const utf8proc_category_t c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_control_format_surrogate_private(uint32_t cp) {
  const utf8proc_category_t c = category(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
         c == UTF8PROC_CATEGORY_CO;
}

bool is_nonspacing_mark(uint32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_MN;
}

std::vector<uint32_t> nfd(const std::vector<uint32_t>& cps) {
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  // A full canonical decomposition is at most 4 code points (UnicodeData.txt);
  // utf8proc reports a larger need as a positive count above the buffer size.
  std::array<utf8proc_int32_t, 8> buf{};
  for (const uint32_t cp : cps) {
    if (cp > utf8::kMaxCodePoint) {
      out.push_back(cp);
      continue;
    }
    int boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(
        static_cast<utf8proc_int32_t>(cp), buf.data(), buf.size(), UTF8PROC_DECOMPOSE, &boundclass);
    MINFER_CHECK(n > 0 && static_cast<size_t>(n) <= buf.size(),
                 "utf8proc_decompose_char(U+%04X) returned %ld", cp, static_cast<long>(n));
    for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(buf[i]));
  }
  // Canonical ordering: within each run of code points with a non-zero combining class,
  // a stable sort by that class (Unicode 3.11, D109).
  auto ccc = [](uint32_t cp) -> int {
    if (cp > utf8::kMaxCodePoint) return 0;
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
  };
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                     out.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  return out;
}

void append_lowercase(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE
    out.push_back(0x69);
    out.push_back(0x307);
    return;
  }
  if (cp > utf8::kMaxCodePoint) {
    out.push_back(cp);
    return;
  }
  out.push_back(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

namespace {
// Built once: byte → code point and code point (< 0x144) → byte.
struct ByteTable {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> to_byte{};
  ByteTable() {
    to_byte.fill(-1);
    auto kept = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = kept(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}
}  // namespace

uint32_t byte_to_cp(uint8_t byte) {
  return byte_table().to_cp[byte];
}

std::optional<uint8_t> cp_to_byte(uint32_t cp) {
  const auto& t = byte_table();
  if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.to_byte[cp]);
}

void append_byte_encoded(std::string& out, std::string_view bytes) {
  for (char c : bytes) utf8::append(out, byte_to_cp(static_cast<uint8_t>(c)));
}

}  // namespace minfer::tokenizer::unicode
