// Stage 1 (core): broken-invariant checks that stay on in every build type.
// Invariant: MINFER_CHECK never returns when its condition is false; it prints
// file:line, the condition and the actual values, then aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace minfer::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
}  // namespace minfer::detail

#define MINFER_CHECK(cond, ...)                                               \
  do {                                                                        \
    if (__builtin_expect(!(cond), 0)) {                                       \
      ::minfer::detail::check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    }                                                                         \
  } while (0)
