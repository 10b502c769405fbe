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
      Json a = Json::array();
      for (const Value& e : v.array) a.push_back(value_to_json<Json>(e));
      return a;
    }
  }
  return nullptr;
}

}  // namespace minfer::gguf
