// Fuzz target (stage 14b): the GBNF parser and the matcher on arbitrary bytes.
// Input: grammar text, then optionally a NUL byte and bytes to feed the matcher.
// Invariants under test: parsing never crashes, hangs or reads out of bounds; an error
// starts with "line:column: "; a grammar that parses prints back (to_gbnf) to a
// grammar that parses and accepts exactly the same prefixes and sentences; the
// matcher never crashes on any bytes (invalid UTF-8 included) and fails loudly
// (an Error) rather than growing without bound.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "grammar/grammar.h"

namespace {

using minfer::grammar::Grammar;
using minfer::grammar::Matcher;

constexpr size_t kMaxFeed = 256;              // matcher input bytes per run
constexpr size_t kMaxElemsToMatch = 1 << 16;  // bigger grammars are only parsed

bool starts_with_line_col(const std::string& m) {
  size_t i = 0;
  auto digits = [&] {
    const size_t s = i;
    while (i < m.size() && m[i] >= '0' && m[i] <= '9') ++i;
    return i > s;
  };
  if (!digits() || i >= m.size() || m[i++] != ':') return false;
  if (!digits()) return false;
  return m.compare(i, 2, ": ") == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view text = in.substr(0, nul);
  const std::string_view feed =
      nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1).substr(0, kMaxFeed);

  auto g = Grammar::parse(text);
  if (!g.ok()) {
    MINFER_CHECK(starts_with_line_col(g.error().message), "error without line:column: %s",
                 g.error().message.c_str());
    return 0;
  }
  const std::string printed = (*g)->to_gbnf();
  auto g2 = Grammar::parse(printed);
  MINFER_CHECK(g2.ok(), "printed grammar does not parse: %s\n%s",
               g2.ok() ? "" : g2.error().message.c_str(), printed.c_str());
  if ((*g)->elems().size() > kMaxElemsToMatch) return 0;

  auto m1 = Matcher::create(*g);
  auto m2 = Matcher::create(*g2);
  MINFER_CHECK(m1.ok() == m2.ok(), "matcher creation differs after printing");
  if (!m1.ok()) return 0;
  for (char c : feed) {
    const std::string_view b(&c, 1);
    const bool a1 = m1->accept(b);
    const bool a2 = m2->accept(b);
    if (m1->table().error() || m2->table().error()) return 0;  // a loud limit, not a bug
    MINFER_CHECK(a1 == a2, "printed grammar accepts differently at byte 0x%02x", c & 0xff);
    MINFER_CHECK(m1->can_end() == m2->can_end(), "printed grammar ends differently");
    if (!a1) break;
  }
  return 0;
}
