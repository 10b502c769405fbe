// Stage 1 (core): the one RAII owner of a read-only memory-mapped file.
// Invariant: views into the mapping (tensor data, strings) never outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/result.h"

namespace minfer {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Maps the pages holding [p, p + n) of a read-only mapping into the process now
// (madvise MADV_POPULATE_READ, batched by the kernel), so later reads take no page faults;
// best effort: a kernel without it, or memory that is not a file mapping, changes nothing.
void populate_pages(const void* p, size_t n);

// Read a whole file into memory (for small inputs: prompts, JSON, templates).
Result<std::string> read_file(const std::string& path);

}  // namespace minfer
