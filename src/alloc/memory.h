// Stage 9 (memory): where bytes come from — one MemoryResource per backend, and the
// RAII Buffer that owns one allocation from it.
// Invariants: every buffer is aligned to at least kTensorAlignment (64 bytes: one
// cache line, and the widest SIMD load AVX-512 kernels issue); a Buffer frees exactly
// once, through the resource that allocated it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/result.h"

namespace minfer::alloc {

inline constexpr uint64_t kTensorAlignment = 64;

// A backend's memory, as the allocator sees it. CPU uses HostMemory; another backend's
// is sched::BackendMemory over its Backend (alloc stays independent of backends). An
// address from a resource that is not host_accessible() is only ever offset and handed
// back to that resource (write/read) or its backend — never dereferenced here.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual std::string_view name() const = 0;
  virtual bool host_accessible() const = 0;
  // Expected failure (out of memory) is an Error naming the size, never a null pointer.
  virtual Result<void*> allocate(uint64_t bytes, uint64_t alignment) = 0;
  // Memory that reads as zeros until written; freed with deallocate like any other. The
  // default writes the zeros through write() (a device's set); host memory gets them
  // from the OS instead (below).
  virtual Result<void*> allocate_zeroed(uint64_t bytes, uint64_t alignment);
  virtual void deallocate(void* ptr, uint64_t bytes) noexcept = 0;
  // Host -> this memory and back (input fills, logits, session KV). For host memory a
  // memcpy; a device's forwards to its backend's set / get (sched::BackendMemory).
  virtual Status write(void* dst, const void* host_src, uint64_t bytes) = 0;
  virtual Status read(void* host_dst, const void* src, uint64_t bytes) = 0;
};

// Aligned host memory; sizes are rounded up to the alignment. Allocations of at least
// kMappedBytes are anonymous mappings of their own: zero pages from the OS, which count
// in the resident set only once written — a KV region sized for a long context costs
// the cells used so far, not n_ctx (llama.cpp clears its whole cache buffer at
// creation, so every page of it is resident). Smaller ones come from aligned_alloc.
class HostMemory final : public MemoryResource {
 public:
  static constexpr uint64_t kMappedBytes = uint64_t{1} << 20;
  std::string_view name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  Result<void*> allocate(uint64_t bytes, uint64_t alignment) override;
  Result<void*> allocate_zeroed(uint64_t bytes, uint64_t alignment) override;
  void deallocate(void* ptr, uint64_t bytes) noexcept override;
  Status write(void* dst, const void* host_src, uint64_t bytes) override;
  Status read(void* host_dst, const void* src, uint64_t bytes) override;
};

// Move-only owner of one allocation. The resource must outlive the buffer (the
// Allocator keeps resources alive for as long as it holds buffers from them).
class Buffer {
 public:
  Buffer() = default;
  static Result<Buffer> allocate(MemoryResource& mr, uint64_t bytes,
                                 uint64_t alignment = kTensorAlignment);
  // The same from mr.allocate_zeroed.
  static Result<Buffer> allocate_zeroed(MemoryResource& mr, uint64_t bytes,
                                        uint64_t alignment = kTensorAlignment);
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset() noexcept;

 private:
  static Result<Buffer> adopt(MemoryResource& mr, void* p, uint64_t bytes, uint64_t alignment);
  MemoryResource* mr_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace minfer::alloc
