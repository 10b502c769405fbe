// Stage 1 (core): the tensor element types of GGUF files, with ggml's numeric ids,
// block sizes and bytes per block. The file layer needs sizes to bounds-check tensor
// data; the quant stage (src/quant/) adds the arithmetic (dequantize, quantize).
// Invariant: ids and sizes equal ggml's `ggml_type` table (ggml/include/ggml.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace minfer {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct DTypeInfo {
  DType type;
  std::string_view name;  // ggml's name: "f32", "q4_K", ...
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

// Info for a known id (any type a GGUF may legally hold, including ones we cannot
// compute with); nullopt for an id ggml does not define.
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

}  // namespace minfer
