// Stage 2 (file): metadata values — constructors, type names, display for `minfer info`.
// Invariant: to_display prints integers and floats exactly (shortest round-trip form).
#include <fmt/format.h>

#include "core/check.h"
#include "core/utf8.h"
#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace minfer::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
      return "u8";
    case ValueType::kInt8:
      return "i8";
    case ValueType::kUint16:
      return "u16";
    case ValueType::kInt16:
      return "i16";
    case ValueType::kUint32:
      return "u32";
    case ValueType::kInt32:
      return "i32";
    case ValueType::kFloat32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kUint64:
      return "u64";
    case ValueType::kInt64:
      return "i64";
    case ValueType::kFloat64:
      return "f64";
  }
  return "unknown";
}

namespace {
Value make_unsigned(ValueType t, uint64_t v) {
  Value r;
  r.type = t;
  r.u = v;
  return r;
}
Value make_signed(ValueType t, int64_t v) {
  Value r;
  r.type = t;
  r.i = v;
  return r;
}
Value make_float(ValueType t, double v) {
  Value r;
  r.type = t;
  r.f = v;
  return r;
}
}  // namespace

Value Value::u8(uint8_t v) {
  return make_unsigned(ValueType::kUint8, v);
}
Value Value::u16(uint16_t v) {
  return make_unsigned(ValueType::kUint16, v);
}
Value Value::u32(uint32_t v) {
  return make_unsigned(ValueType::kUint32, v);
}
Value Value::u64(uint64_t v) {
  return make_unsigned(ValueType::kUint64, v);
}
Value Value::boolean(bool v) {
  return make_unsigned(ValueType::kBool, v ? 1 : 0);
}
Value Value::i8(int8_t v) {
  return make_signed(ValueType::kInt8, v);
}
Value Value::i16(int16_t v) {
  return make_signed(ValueType::kInt16, v);
}
Value Value::i32(int32_t v) {
  return make_signed(ValueType::kInt32, v);
}
Value Value::i64(int64_t v) {
  return make_signed(ValueType::kInt64, v);
}
Value Value::f32(float v) {
  return make_float(ValueType::kFloat32, v);
}
Value Value::f64(double v) {
  return make_float(ValueType::kFloat64, v);
}

Value Value::string(std::string v) {
  Value r;
  r.type = ValueType::kString;
  r.str = std::move(v);
  return r;
}

Value Value::arr(ValueType elem_type, std::vector<Value> elems) {
  for (size_t k = 0; k < elems.size(); ++k) {
    MINFER_CHECK(elems[k].type == elem_type, "array element #%zu has type %s, array holds %s", k,
                 std::string(value_type_name(elems[k].type)).c_str(),
                 std::string(value_type_name(elem_type)).c_str());
  }
  Value r;
  r.type = ValueType::kArray;
  r.array_type = elem_type;
  r.array = std::move(elems);
  return r;
}

Value Value::string_array(const std::vector<std::string>& v) {
  std::vector<Value> e;
  e.reserve(v.size());
  for (const auto& s : v) e.push_back(string(s));
  return arr(ValueType::kString, std::move(e));
}

Value Value::f32_array(const std::vector<float>& v) {
  std::vector<Value> e;
  e.reserve(v.size());
  for (float x : v) e.push_back(f32(x));
  return arr(ValueType::kFloat32, std::move(e));
}

Value Value::i32_array(const std::vector<int32_t>& v) {
  std::vector<Value> e;
  e.reserve(v.size());
  for (int32_t x : v) e.push_back(i32(x));
  return arr(ValueType::kInt32, std::move(e));
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const {
  return type == ValueType::kFloat32 || type == ValueType::kFloat64;
}

namespace {

bool is_signed_type(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
}

void append_display(std::string& out, const Value& v, size_t max_elems) {
  switch (v.type) {
    case ValueType::kBool:
      out += v.u != 0 ? "true" : "false";
      return;
    case ValueType::kFloat32:
      out += fmt::format("{}", static_cast<float>(v.f));  // shortest form that round-trips
      return;
    case ValueType::kFloat64:
      out += fmt::format("{}", v.f);
      return;
    case ValueType::kString:
      append_escaped(out, v.str);
      return;
    case ValueType::kArray: {
      out += '[';
      const size_t shown = std::min(max_elems, v.array.size());
      for (size_t k = 0; k < shown; ++k) {
        if (k > 0) out += ", ";
        append_display(out, v.array[k], max_elems);
      }
      if (shown < v.array.size()) {
        out += fmt::format("{}... ({} {} total)", shown > 0 ? ", " : "", v.array.size(),
                           value_type_name(v.array_type));
      }
      out += ']';
      return;
    }
    default:
      if (is_signed_type(v.type)) {
        out += fmt::format("{}", v.i);
      } else {
        out += fmt::format("{}", v.u);
      }
  }
}

}  // namespace

std::string Value::to_display(size_t max_elems) const {
  std::string out;
  append_display(out, *this, max_elems);
  return out;
}

namespace detail {

std::string key_problem(std::string_view key) {
  if (key.empty()) return "key is empty";
  if (!utf8::is_valid(key)) return "key " + quote_for_error(key) + " is not valid UTF-8";
  return {};
}

std::string tensor_name_problem(std::string_view name) {
  if (name.empty()) return "tensor name is empty";
  if (name.size() > kMaxTensorNameLength) {
    return fmt::format("tensor name {} is {} bytes long, more than the {} ggml allows",
                       quote_for_error(name), name.size(), kMaxTensorNameLength);
  }
  if (!utf8::is_valid(name)) return "tensor name " + quote_for_error(name) + " is not valid UTF-8";
  if (name.find('\0') != std::string_view::npos) {
    return "tensor name " + quote_for_error(name) + " contains a NUL byte";
  }
  return {};
}

std::string quote_for_error(std::string_view s) {
  std::string out = "'";
  const size_t shown = std::min<size_t>(s.size(), 64);
  for (size_t k = 0; k < shown; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < s.size()) out += fmt::format("...({} bytes)", s.size());
  out += "'";
  return out;
}

}  // namespace detail
}  // namespace minfer::gguf
