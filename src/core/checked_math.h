// Stage 1 (core): overflow-safe arithmetic for sizes read from untrusted files.
// Invariant: every function returns false instead of wrapping.
#pragma once

#include <cstdint>

namespace minfer {

inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// Round `x` up to a multiple of `align` (align > 0), failing on overflow.
inline bool checked_align_up(uint64_t x, uint64_t align, uint64_t* out) {
  uint64_t r = x % align;
  if (r == 0) {
    *out = x;
    return true;
  }
  return checked_add(x, align - r, out);
}

}  // namespace minfer
