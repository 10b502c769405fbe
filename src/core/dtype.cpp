// Stage 1 (core): the ggml type table.
#include "core/dtype.h"

#include <array>
#include <cctype>

#include "core/check.h"

namespace minfer {
namespace {

constexpr std::array kTypes = {
    DTypeInfo{DType::kF32, "f32", 1, 4},
    DTypeInfo{DType::kF16, "f16", 1, 2},
    DTypeInfo{DType::kQ4_0, "q4_0", 32, 18},
    DTypeInfo{DType::kQ4_1, "q4_1", 32, 20},
    DTypeInfo{DType::kQ5_0, "q5_0", 32, 22},
    DTypeInfo{DType::kQ5_1, "q5_1", 32, 24},
    DTypeInfo{DType::kQ8_0, "q8_0", 32, 34},
    DTypeInfo{DType::kQ8_1, "q8_1", 32, 36},
    DTypeInfo{DType::kQ2_K, "q2_K", 256, 84},
    DTypeInfo{DType::kQ3_K, "q3_K", 256, 110},
    DTypeInfo{DType::kQ4_K, "q4_K", 256, 144},
    DTypeInfo{DType::kQ5_K, "q5_K", 256, 176},
    DTypeInfo{DType::kQ6_K, "q6_K", 256, 210},
    DTypeInfo{DType::kQ8_K, "q8_K", 256, 292},
    DTypeInfo{DType::kIQ2_XXS, "iq2_xxs", 256, 66},
    DTypeInfo{DType::kIQ2_XS, "iq2_xs", 256, 74},
    DTypeInfo{DType::kIQ3_XXS, "iq3_xxs", 256, 98},
    DTypeInfo{DType::kIQ1_S, "iq1_s", 256, 50},
    DTypeInfo{DType::kIQ4_NL, "iq4_nl", 32, 18},
    DTypeInfo{DType::kIQ3_S, "iq3_s", 256, 110},
    DTypeInfo{DType::kIQ2_S, "iq2_s", 256, 82},
    DTypeInfo{DType::kIQ4_XS, "iq4_xs", 256, 136},
    DTypeInfo{DType::kI8, "i8", 1, 1},
    DTypeInfo{DType::kI16, "i16", 1, 2},
    DTypeInfo{DType::kI32, "i32", 1, 4},
    DTypeInfo{DType::kI64, "i64", 1, 8},
    DTypeInfo{DType::kF64, "f64", 1, 8},
    DTypeInfo{DType::kIQ1_M, "iq1_m", 256, 56},
    DTypeInfo{DType::kBF16, "bf16", 1, 2},
    DTypeInfo{DType::kTQ1_0, "tq1_0", 256, 54},
    DTypeInfo{DType::kTQ2_0, "tq2_0", 256, 66},
    DTypeInfo{DType::kMXFP4, "mxfp4", 32, 17},
};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& info : kTypes) {
    if (info.type == t) return info;
  }
  MINFER_CHECK(false, "DType id %u is not in the type table", static_cast<unsigned>(t));
}

std::string_view dtype_name(DType t) {
  return dtype_info(t).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (iequals(t.name, name)) return t.type;
  }
  return std::nullopt;
}

}  // namespace minfer
