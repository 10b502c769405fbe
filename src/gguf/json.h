// Stage 2 (file): a GGUF metadata Value as JSON, for `minfer info --json` and the test
// tools. Header-only so the gguf library itself does not link nlohmann_json; `Json` is
// nlohmann::json or nlohmann::ordered_json. Integers keep their signedness, floats are
// doubles, bools are bools, arrays nest.
#pragma once

#include "gguf/gguf.h"

namespace minfer::gguf {

template <class Json>
Json value_to_json(const Value& v) {
  switch (v.type) {
    case ValueType::kUint8:
    case ValueType::kUint16:
    case ValueType::kUint32:
    case ValueType::kUint64:
      return v.u;
    case ValueType::kInt8:
    case ValueType::kInt16:
    case ValueType::kInt32:
    case ValueType::kInt64:
      return v.i;
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return v.f;
    case ValueType::kBool:
      return v.u != 0;
    case ValueType::kString:
      return v.str;
    case ValueType::kArray: {
      // Elements straight from the compact array, without a Value each.
      const Array& arr = v.array;
      Json a = Json::array();
      for (size_t k = 0; k < arr.size(); ++k) {
        switch (arr.type()) {
          case ValueType::kString:
            a.push_back(std::string(arr.string_at(k)));
            break;
          case ValueType::kArray:
            a.push_back(value_to_json<Json>(arr.nested_at(k)));
            break;
          case ValueType::kFloat32:
          case ValueType::kFloat64:
            a.push_back(arr.float_at(k));
            break;
          case ValueType::kBool:
            a.push_back(arr.uint_at(k) != 0);
            break;
          case ValueType::kInt8:
          case ValueType::kInt16:
          case ValueType::kInt32:
          case ValueType::kInt64:
            a.push_back(arr.int_at(k));
            break;
          default:
            a.push_back(arr.uint_at(k));
        }
      }
      return a;
    }
  }
  return nullptr;
}

}  // namespace minfer::gguf
