// Stage 17 (HTTP): the pages the server carries — src/server/web/*.html, compiled in at
// build time (web/embed.cmake writes their bytes into a generated source), so the
// binary serves them with no file, network or build tool at run time.
#pragma once

#include <cstddef>
#include <string_view>

namespace minfer::server::web {

extern const unsigned char chat_bytes[];
extern const size_t chat_size;
extern const unsigned char viz_bytes[];
extern const size_t viz_size;

// GET /: the chat page (web/chat.html).
inline std::string_view chat_html() {
  return {reinterpret_cast<const char*>(chat_bytes), chat_size};
}
// GET /viz: the engine view (web/viz.html).
inline std::string_view viz_html() {
  return {reinterpret_cast<const char*>(viz_bytes), viz_size};
}

}  // namespace minfer::server::web
