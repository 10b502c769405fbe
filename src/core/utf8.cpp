// Stage 1 (core): UTF-8 encoder and strict classifier (utf8.h).
#include "core/utf8.h"

#include <array>

namespace minfer::utf8 {

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(uint32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

size_t lead_length(uint8_t lead) {
  static constexpr std::array<uint8_t, 16> kLen = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

Scan scan(const unsigned char* p, size_t n, size_t& len, uint32_t& cp) {
  const unsigned char c = p[0];
  if (c < 0x80) {
    len = 1;
    cp = c;
    return Scan::kValid;
  }
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    len = 1;  // 80..C1 (continuation or overlong lead), F5..FF
    return Scan::kInvalid;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return Scan::kTruncated;
    const unsigned char b = p[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      len = i;
      return Scan::kInvalid;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  len = need;
  return Scan::kValid;
}

bool is_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    uint32_t cp = 0;
    if (scan(p + i, s.size() - i, len, cp) != Scan::kValid) return false;
    i += len;
  }
  return true;
}

size_t incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  const size_t lowest = n >= 4 ? n - 4 : 0;
  for (size_t i = n; i > lowest; --i) {
    const auto b = static_cast<uint8_t>(s[i - 1]);
    if (is_continuation(b)) continue;
    size_t need = 1;
    if ((b & 0xE0) == 0xC0) {
      need = 2;
    } else if ((b & 0xF0) == 0xE0) {
      need = 3;
    } else if ((b & 0xF8) == 0xF0) {
      need = 4;
    }
    const size_t have = n - (i - 1);
    return have < need ? have : 0;
  }
  return 0;  // only continuation bytes: nothing can complete them
}

}  // namespace minfer::utf8
