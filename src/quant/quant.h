// Stage 3 (quant): the tensor element types we compute with — block geometry, scalar
// dequantize and the reference quantizer, looked up by DType.
// Invariants: dequantize and quantize_ref are bit-exact with llama.cpp's
// dequantize_row_* / quantize_row_*_ref (ggml/src/ggml-quants.c, no importance
// matrix), proved by tests/quant against goldens written by ggml itself; block_size
// and type_size come from the one table in core/dtype.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/result.h"

namespace minfer::quant {

// n is a count of elements and a multiple of the type's block_size.
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeTraits {
  DType type;
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
  DequantizeFn dequantize;
  QuantizeFn quantize_ref;  // nullptr if the type has no reference quantizer
};

// Traits of a type we can compute with: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
// Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K. nullptr for any other type.
const TypeTraits* traits(DType type);

// Bytes that `n_elements` of `type` occupy; an error if n is not a whole number of
// blocks or the type is unknown to the table.
Result<uint64_t> row_bytes(DType type, uint64_t n_elements);

// llama-quantize's tensor_type_fallback: the type a `target` tensor with `ncols`-element
// rows gets when target's block size does not divide them — a 32-block type of similar
// size (Q2_K/Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0), or F16 when even that
// does not fit; `target` itself when it fits.
DType tensor_type_fallback(DType target, uint64_t ncols);

// Checked front doors: `dst.size()` elements are decoded from exactly
// row_bytes(type, dst.size()) bytes of `src`, and vice versa. Errors name the type
// and the sizes; nothing is written on error. Block data must be aligned like its
// block struct (2 bytes; 4 for Q8_K), as GGUF tensor data always is.
Status dequantize(DType type, std::span<const uint8_t> src, std::span<float> dst);
Status quantize(DType type, std::span<const float> src, std::span<uint8_t> dst);

}  // namespace minfer::quant
