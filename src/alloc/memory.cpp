// Stage 9 (memory): host memory and the Buffer owner.
// Invariant: allocation failures are Errors with the requested size.
#include "alloc/memory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/checked_math.h"

namespace minfer::alloc {

Result<void*> HostMemory::allocate(uint64_t bytes, uint64_t alignment) {
  MINFER_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
               "alignment %llu is not a power of two", static_cast<unsigned long long>(alignment));
  uint64_t rounded = 0;
  if (!checked_align_up(bytes == 0 ? alignment : bytes, alignment, &rounded)) {
    return make_error(fmt::format("host allocation of {} bytes overflows", bytes));
  }
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    return make_error(fmt::format("host allocation of {} bytes failed", rounded));
  }
  return p;
}

void HostMemory::deallocate(void* ptr, uint64_t /*bytes*/) noexcept {
  std::free(ptr);
}

Status HostMemory::write(void* dst, const void* host_src, uint64_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
  return Ok{};
}

Status HostMemory::read(void* host_dst, const void* src, uint64_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
  return Ok{};
}

Result<Buffer> Buffer::allocate(MemoryResource& mr, uint64_t bytes, uint64_t alignment) {
  MINFER_TRY(void* p, mr.allocate(bytes, alignment));
  MINFER_CHECK(reinterpret_cast<uintptr_t>(p) % alignment == 0,
               "%.*s returned a pointer not aligned to %llu", static_cast<int>(mr.name().size()),
               mr.name().data(), static_cast<unsigned long long>(alignment));
  Buffer b;
  b.mr_ = &mr;
  b.data_ = static_cast<std::byte*>(p);
  b.bytes_ = bytes;
  return b;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    mr_ = o.mr_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.mr_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (data_ != nullptr) mr_->deallocate(data_, bytes_);
  mr_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace minfer::alloc
