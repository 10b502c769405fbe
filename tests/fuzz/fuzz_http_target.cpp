// Fuzz target (stage 17): the request target's decoding the server does by hand
// (server/http_types.h: percent_decode, parse_query) on arbitrary bytes. Beast parses
// the request itself; the path and query it hands over are decoded here.
// Input: byte 0 picks the mode (even: a path, odd: a query); the rest is the text.
// Invariants under test: nothing crashes or reads out of bounds; decoding never grows
// the text; text without '%' (and, for a query, '+') decodes to itself; a query gives
// at most one parameter per '&'-separated piece.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "server/http_types.h"

namespace http = minfer::server::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool query = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string decoded = http::percent_decode(text, query);
  MINFER_CHECK(decoded.size() <= text.size(), "decoding grew %zu bytes to %zu", text.size(),
               decoded.size());
  const bool plain = text.find('%') == std::string_view::npos &&
                     (!query || text.find('+') == std::string_view::npos);
  if (plain) MINFER_CHECK(decoded == text, "text without escapes changed");
  if (query) {
    const http::Params params = http::parse_query(text);
    const size_t pieces = static_cast<size_t>(std::count(text.begin(), text.end(), '&')) + 1;
    MINFER_CHECK(params.size() <= pieces, "%zu parameters from %zu pieces", params.size(), pieces);
    for (const auto& [k, v] : params) {
      MINFER_CHECK(k.size() + v.size() <= text.size(), "a parameter is longer than the query");
    }
  }
  return 0;
}
