// Fuzz target (stage 17): the loading responder's own HTTP reading (server/loading.h)
// on arbitrary bytes — the head read piece by piece as recv would return it, the path
// taken from its request line, the 503 answered for that path.
// Input: byte 0 sets the piece size (1..256); the rest is what the client sends.
// Invariants under test: nothing crashes or reads out of bounds; reading stops at the
// first piece that completes the head, never before; the path is a piece of the head
// with no space, '?' or CR in it; a request line "GET /health" ended by a space, '?'
// or CRLF gets the /health answer however the bytes come; every answer is a 503 whose
// Content-Length is its body's size.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "server/loading.h"

using minfer::server::LoadingResponder;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 256;
  const std::string_view sent(reinterpret_cast<const char*>(data + 1), size - 1);
  // The responder's loop: append a piece while the head is incomplete.
  std::string head;
  for (size_t at = 0; at < sent.size() && !LoadingResponder::head_complete(head); at += piece) {
    head.append(sent.substr(at, piece));
  }
  MINFER_CHECK(sent.substr(0, head.size()) == head, "the head is not what was sent");
  if (head.size() < sent.size()) {
    MINFER_CHECK(LoadingResponder::head_complete(head), "stopped before the head was complete");
    const std::string_view before = std::string_view(head).substr(0, head.size() - piece);
    MINFER_CHECK(!LoadingResponder::head_complete(before), "read past a complete head");
  }
  const std::string path = LoadingResponder::request_path(head);
  MINFER_CHECK(head.find(path) != std::string::npos, "the path is not in the head");
  MINFER_CHECK(path.find_first_of(" ?\r") == std::string::npos, "the path holds ' ', '?' or CR");
  for (const std::string_view end : {" ", "?", "\r\n"}) {
    const std::string line = "GET /health" + std::string(end);
    if (sent.substr(0, line.size()) == line) {
      MINFER_CHECK(path == "/health", "GET /health read as '%s'", path.c_str());
    }
  }
  const std::string res = LoadingResponder::response(path);
  const size_t body_at = res.find("\r\n\r\n");
  MINFER_CHECK(res.rfind("HTTP/1.1 503 ", 0) == 0 && body_at != std::string::npos,
               "not a 503 response");
  const std::string length = "Content-Length: " + std::to_string(res.size() - body_at - 4) + "\r\n";
  MINFER_CHECK(res.find(length) != std::string::npos, "Content-Length is not the body's size");
  return 0;
}
