// Stage 3 (quant): the traits table and the size-checked dequantize/quantize doors.
// Invariant: block_size/type_size are read from core's dtype table, never restated.
#include "quant/quant.h"

#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace minfer::quant {
namespace {

struct Kernels {
  DType type;
  DequantizeFn dequantize;
  QuantizeFn quantize_ref;
};

constexpr std::array kKernels = {
    Kernels{DType::kF32, detail::dequantize_f32, detail::quantize_f32},
    Kernels{DType::kF16, detail::dequantize_f16, detail::quantize_f16},
    Kernels{DType::kBF16, detail::dequantize_bf16, detail::quantize_bf16},
    Kernels{DType::kQ4_0, detail::dequantize_q4_0, detail::quantize_q4_0},
    Kernels{DType::kQ4_1, detail::dequantize_q4_1, detail::quantize_q4_1},
    Kernels{DType::kQ5_0, detail::dequantize_q5_0, detail::quantize_q5_0},
    Kernels{DType::kQ5_1, detail::dequantize_q5_1, detail::quantize_q5_1},
    Kernels{DType::kQ8_0, detail::dequantize_q8_0, detail::quantize_q8_0},
    Kernels{DType::kQ2_K, detail::dequantize_q2_k, detail::quantize_q2_k},
    Kernels{DType::kQ3_K, detail::dequantize_q3_k, detail::quantize_q3_k},
    Kernels{DType::kQ4_K, detail::dequantize_q4_k, detail::quantize_q4_k},
    Kernels{DType::kQ5_K, detail::dequantize_q5_k, detail::quantize_q5_k},
    Kernels{DType::kQ6_K, detail::dequantize_q6_k, detail::quantize_q6_k},
    Kernels{DType::kQ8_K, detail::dequantize_q8_k, detail::quantize_q8_k},
};

std::string type_label(DType type) {
  const auto info = dtype_info(static_cast<uint32_t>(type));
  return info ? std::string(info->name) : "type id " + std::to_string(static_cast<uint32_t>(type));
}

// Kernels read block fields in place, so block data must be aligned like the block
// struct (GGUF tensor data is aligned to 32 bytes or more); F32/F16/BF16 use memcpy.
size_t required_alignment(DType type) {
  switch (type) {
    case DType::kQ8_K:
      return alignof(BlockQ8_K);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return 1;
    default:
      return alignof(Half);
  }
}

Status check_alignment(DType type, const void* p) {
  const size_t align = required_alignment(type);
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    return make_error(type_label(type) + " block data at " +
                      std::to_string(reinterpret_cast<uintptr_t>(p)) + " is not " +
                      std::to_string(align) + "-byte aligned");
  }
  return Ok{};
}

// Built once from the kernel list and core's geometry table.
std::array<TypeTraits, kKernels.size()> make_traits() {
  std::array<TypeTraits, kKernels.size()> out{};
  for (size_t i = 0; i < kKernels.size(); ++i) {
    const DTypeInfo& info = dtype_info(kKernels[i].type);
    out[i] = TypeTraits{.type = kKernels[i].type,
                        .block_size = info.block_size,
                        .type_size = info.type_size,
                        .dequantize = kKernels[i].dequantize,
                        .quantize_ref = kKernels[i].quantize_ref};
  }
  return out;
}

const std::array<TypeTraits, kKernels.size()>& table() {
  static const auto t = make_traits();
  return t;
}

// The traits for `type`, or an error naming it (`what` is "dequantize"/"quantize").
Result<const TypeTraits*> lookup(DType type, const char* what) {
  const TypeTraits* t = traits(type);
  if (t == nullptr) return make_error(std::string("cannot ") + what + " " + type_label(type));
  return t;
}

}  // namespace

const TypeTraits* traits(DType type) {
  for (const auto& t : table()) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

Result<uint64_t> row_bytes(DType type, uint64_t n_elements) {
  const auto info = dtype_info(static_cast<uint32_t>(type));
  if (!info) return make_error("unknown " + type_label(type));
  if (n_elements % info->block_size != 0) {
    return make_error(std::to_string(n_elements) + " elements of " + type_label(type) +
                      " are not a whole number of " + std::to_string(info->block_size) +
                      "-element blocks");
  }
  // n / block_size * type_size cannot overflow: type_size <= 292 and n_blocks < 2^64 / 256.
  return n_elements / info->block_size * info->type_size;
}

DType tensor_type_fallback(DType target, uint64_t ncols) {
  auto block = [](DType t) { return dtype_info(static_cast<uint32_t>(t))->block_size; };
  if (ncols % block(target) == 0) return target;
  DType r = target;
  switch (target) {
    case DType::kQ2_K:
    case DType::kQ3_K:
      r = DType::kQ4_0;
      break;
    case DType::kQ4_K:
      r = DType::kQ5_0;
      break;
    case DType::kQ5_K:
      r = DType::kQ5_1;
      break;
    case DType::kQ6_K:
      r = DType::kQ8_0;
      break;
    default:
      break;
  }
  return ncols % block(r) == 0 ? r : DType::kF16;
}

Status dequantize(DType type, std::span<const uint8_t> src, std::span<float> dst) {
  MINFER_TRY(const TypeTraits* t, lookup(type, "dequantize"));
  MINFER_TRY(uint64_t bytes, row_bytes(type, dst.size()));
  if (src.size() != bytes) {
    return make_error("dequantize " + type_label(type) + ": " + std::to_string(dst.size()) +
                      " elements need " + std::to_string(bytes) + " bytes, got " +
                      std::to_string(src.size()));
  }
  MINFER_TRY_STATUS(check_alignment(type, src.data()));
  t->dequantize(src.data(), dst.data(), static_cast<int64_t>(dst.size()));
  return Ok{};
}

Status quantize(DType type, std::span<const float> src, std::span<uint8_t> dst) {
  MINFER_TRY(const TypeTraits* t, lookup(type, "quantize"));
  if (t->quantize_ref == nullptr) {
    return make_error("no reference quantizer for " + type_label(type));
  }
  MINFER_TRY(uint64_t bytes, row_bytes(type, src.size()));
  if (dst.size() != bytes) {
    return make_error("quantize " + type_label(type) + ": " + std::to_string(src.size()) +
                      " elements need " + std::to_string(bytes) + " bytes, got " +
                      std::to_string(dst.size()));
  }
  MINFER_TRY_STATUS(check_alignment(type, dst.data()));
  t->quantize_ref(src.data(), dst.data(), static_cast<int64_t>(src.size()));
  return Ok{};
}

}  // namespace minfer::quant
