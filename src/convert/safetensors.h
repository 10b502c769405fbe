// Stage 3b (convert): a read-only, bounds-checked reader for Hugging Face .safetensors
// files. Debian has no C++ safetensors library (`apt-cache search safetensors` finds
// nothing), so this is a small one. Format: an 8-byte little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {...}}, then the data section; offsets are relative to the data section.
// Spec: https://github.com/huggingface/safetensors#format
// Invariants: every tensor's [begin, end) lies inside the data section, end - begin is
// exactly product(shape) × dtype size (computed without overflow), and the views point
// into the one MappedFile the SafetensorsFile owns.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/result.h"

namespace minfer::convert {

// The element types a safetensors header may name. Only F32 / F16 / BF16 are
// converted; the others are recognised so that the error can name them.
enum class StDType { kF32, kF16, kBF16, kOther };

struct StTensor {
  std::string name;
  StDType dtype = StDType::kF32;
  std::string dtype_name;       // as the header spells it ("F32", "I64", ...)
  uint32_t elem_size = 0;       // bytes per element
  std::vector<uint64_t> shape;  // row-major, outermost first (PyTorch order)
  uint64_t n_elements = 0;
  std::span<const uint8_t> data;  // into the mapping
};

// Validates a whole safetensors file's bytes (header length, JSON header, every entry);
// the tensors' data views point into `bytes`, sorted by name. The fuzz target's entry.
Result<std::vector<StTensor>> parse_safetensors(std::span<const uint8_t> bytes);

class SafetensorsFile {
 public:
  // mmap and validate. Errors name the file, the tensor and the field.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return map_->path(); }
  // Tensors sorted by name, the order in which the safetensors Python package (and
  // llama.cpp's converter) list them.
  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> map_;
  std::vector<StTensor> tensors_;
};

}  // namespace minfer::convert
