// Stage 1 (core): the escape of one character inside a JSON string — shared by the
// template engine's tojson and the JSON Schema converter's string grammars, which must
// agree with each other and with Python's json.dumps (short forms where JSON has them,
// else \u00xx in lower-case hex).
#pragma once

#include <cstdint>
#include <string>

namespace minfer {

// '"', '\\' and the controls below U+0020: what a JSON string may not hold as itself.
inline bool json_must_escape(uint32_t c) {
  return c < 0x20 || c == '"' || c == '\\';
}

// Appends the escape of `c` (json_must_escape(c)): \" \\ \b \f \n \r \t, or \u00xx.
void append_json_escape(std::string& out, uint32_t c);

}  // namespace minfer
