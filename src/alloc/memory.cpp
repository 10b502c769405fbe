// Stage 9 (memory): host memory and the Buffer owner.
// Invariant: allocation failures are Errors with the requested size.
#include "alloc/memory.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/checked_math.h"

namespace minfer::alloc {

Result<void*> MemoryResource::allocate_zeroed(uint64_t bytes, uint64_t alignment) {
  MINFER_TRY(void* p, allocate(bytes, alignment));
  static constexpr uint64_t kChunk = 1 << 16;
  static const std::vector<std::byte> zeros(kChunk);
  for (uint64_t at = 0; at < bytes; at += kChunk) {
    if (Status st =
            write(static_cast<std::byte*>(p) + at, zeros.data(), std::min(kChunk, bytes - at));
        !st.ok()) {
      deallocate(p, bytes);
      return st.error();
    }
  }
  return p;
}

namespace {

uint64_t page_size() {
  static const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

Result<void*> HostMemory::allocate(uint64_t bytes, uint64_t alignment) {
  MINFER_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
               "alignment %llu is not a power of two", static_cast<unsigned long long>(alignment));
  uint64_t rounded = 0;
  if (!checked_align_up(bytes == 0 ? alignment : bytes, alignment, &rounded)) {
    return make_error(fmt::format("host allocation of {} bytes overflows", bytes));
  }
  if (bytes >= kMappedBytes) {
    // Its own mapping, exactly [p, p + bytes rounded to pages): an alignment above the
    // page size maps that much more and unmaps the slack on both sides.
    const uint64_t page = page_size();
    const uint64_t align = std::max(alignment, page);
    uint64_t mapped = 0, total = 0;
    if (!checked_align_up(bytes, page, &mapped) ||
        !checked_add(mapped, align == page ? 0 : align, &total)) {
      return make_error(fmt::format("host allocation of {} bytes overflows", bytes));
    }
    void* raw = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      return make_error(fmt::format("host allocation of {} bytes failed", mapped));
    }
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + align - 1) / align * align;
    if (start > base) munmap(raw, start - base);
    if (base + total > start + mapped) {
      munmap(reinterpret_cast<void*>(start + mapped), base + total - (start + mapped));
    }
    return reinterpret_cast<void*>(start);
  }
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    return make_error(fmt::format("host allocation of {} bytes failed", rounded));
  }
  return p;
}

Result<void*> HostMemory::allocate_zeroed(uint64_t bytes, uint64_t alignment) {
  MINFER_TRY(void* p, allocate(bytes, alignment));
  // A mapping is zero already (and stays out of the resident set until written).
  if (bytes < kMappedBytes) std::memset(p, 0, bytes);
  return p;
}

void HostMemory::deallocate(void* ptr, uint64_t bytes) noexcept {
  if (bytes >= kMappedBytes) {
    munmap(ptr, (bytes + page_size() - 1) / page_size() * page_size());
    return;
  }
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
  return adopt(mr, p, bytes, alignment);
}

Result<Buffer> Buffer::allocate_zeroed(MemoryResource& mr, uint64_t bytes, uint64_t alignment) {
  MINFER_TRY(void* p, mr.allocate_zeroed(bytes, alignment));
  return adopt(mr, p, bytes, alignment);
}

Result<Buffer> Buffer::adopt(MemoryResource& mr, void* p, uint64_t bytes, uint64_t alignment) {
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
