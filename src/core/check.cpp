// Stage 1 (core): implementation of MINFER_CHECK's failure path.
#include "core/check.h"

#include <cstdarg>

namespace minfer::detail {

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
  std::fprintf(stderr, "minfer: invariant broken at %s:%d: %s\n  ", file, line, cond);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace minfer::detail
