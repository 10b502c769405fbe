// Stage 11/12 seam: the Backend interface's host-memory defaults — what a backend whose
// memory is the host's (the CPU) needs: aligned_alloc, and memcpy for set/get.
// Invariant: allocation failures are Errors naming the size; a backend that is not
// host-addressable must override every memory method (the defaults refuse loudly).
#include "backend/backend.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/checked_math.h"

namespace minfer::backend {

Result<void*> Backend::alloc_buffer(uint64_t bytes, uint64_t alignment) {
  MINFER_CHECK(host_addressable(), "backend %.*s: device memory without alloc_buffer",
               static_cast<int>(name().size()), name().data());
  MINFER_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
               "alignment %llu is not a power of two", static_cast<unsigned long long>(alignment));
  uint64_t rounded = 0;
  if (!checked_align_up(bytes == 0 ? alignment : bytes, alignment, &rounded)) {
    return make_error(fmt::format("{}: allocation of {} bytes overflows", name(), bytes));
  }
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr)
    return make_error(fmt::format("{}: allocation of {} bytes failed", name(), rounded));
  return p;
}

void Backend::free_buffer(void* ptr, uint64_t /*bytes*/) noexcept {
  std::free(ptr);
}

Status Backend::set(void* dst, const void* host_src, uint64_t bytes) {
  MINFER_CHECK(host_addressable(), "backend %.*s: device memory without set",
               static_cast<int>(name().size()), name().data());
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
  return Ok{};
}

Status Backend::get(void* host_dst, const void* src, uint64_t bytes) {
  MINFER_CHECK(host_addressable(), "backend %.*s: device memory without get",
               static_cast<int>(name().size()), name().data());
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
  return Ok{};
}

Status Backend::copy_from(void* /*dst*/, const Backend& from, const void* /*src*/,
                          uint64_t /*bytes*/) {
  return make_error(fmt::format("backend {} has no peer copy from {} (can_copy_from is false)",
                                name(), from.name()));
}

}  // namespace minfer::backend
