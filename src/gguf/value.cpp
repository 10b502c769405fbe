// Stage 2 (file): metadata values — constructors, compact arrays, type names, display for
// `minfer info`.
// Invariants: to_display prints integers and floats exactly (shortest round-trip form); an
// Array holds elements of its one type only, scalars at their file width.
#include <fmt/format.h>

#include <cstring>

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

Value Value::arr(ValueType elem_type, const std::vector<Value>& elems) {
  for (size_t k = 0; k < elems.size(); ++k) {
    MINFER_CHECK(elems[k].type == elem_type, "array element #%zu has type %s, array holds %s", k,
                 std::string(value_type_name(elems[k].type)).c_str(),
                 std::string(value_type_name(elem_type)).c_str());
  }
  Array a(elem_type);
  a.reserve(elems.size());
  for (const Value& e : elems) a.push_back(e);
  return arr(std::move(a));
}

Value Value::arr(Array elems) {
  Value r;
  r.type = ValueType::kArray;
  r.array = std::move(elems);
  return r;
}

Value Value::string_array(const std::vector<std::string>& v) {
  Array a(ValueType::kString);
  a.reserve(v.size());
  for (const auto& s : v) a.push_string(s);
  return arr(std::move(a));
}

Value Value::f32_array(const std::vector<float>& v) {
  Array a(ValueType::kFloat32);
  a.reserve(v.size());
  for (float x : v) a.push_back(f32(x));
  return arr(std::move(a));
}

Value Value::i32_array(const std::vector<int32_t>& v) {
  Array a(ValueType::kInt32);
  a.reserve(v.size());
  for (int32_t x : v) a.push_back(i32(x));
  return arr(std::move(a));
}

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void store(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

bool is_signed_type(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

bool is_unsigned_type(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 ||
         t == ValueType::kUint64 || t == ValueType::kBool;
}

void check_element(const Array& a, size_t k, bool type_ok, const char* want) {
  MINFER_CHECK(k < a.size(), "array element #%zu read past the end (%zu elements)", k, a.size());
  MINFER_CHECK(type_ok, "array of %s read as %s", std::string(value_type_name(a.type())).c_str(),
               want);
}

}  // namespace

std::string_view Array::string_at(size_t k) const {
  check_element(*this, k, type_ == ValueType::kString, "string");
  const uint64_t begin = k == 0 ? 0 : ends_[k - 1];
  return {reinterpret_cast<const char*>(data_.data()) + begin,
          static_cast<size_t>(ends_[k] - begin)};
}

uint64_t Array::uint_at(size_t k) const {
  check_element(*this, k, is_unsigned_type(type_), "an unsigned integer");
  const uint8_t* p = data_.data() + k * scalar_size(type_);
  switch (type_) {
    case ValueType::kUint16:
      return load<uint16_t>(p);
    case ValueType::kUint32:
      return load<uint32_t>(p);
    case ValueType::kUint64:
      return load<uint64_t>(p);
    default:  // u8, bool
      return *p;
  }
}

int64_t Array::int_at(size_t k) const {
  check_element(*this, k, is_signed_type(type_), "a signed integer");
  const uint8_t* p = data_.data() + k * scalar_size(type_);
  switch (type_) {
    case ValueType::kInt8:
      return load<int8_t>(p);
    case ValueType::kInt16:
      return load<int16_t>(p);
    case ValueType::kInt32:
      return load<int32_t>(p);
    default:  // i64
      return load<int64_t>(p);
  }
}

double Array::float_at(size_t k) const {
  check_element(*this, k, type_ == ValueType::kFloat32 || type_ == ValueType::kFloat64, "a float");
  const uint8_t* p = data_.data() + k * scalar_size(type_);
  return type_ == ValueType::kFloat32 ? static_cast<double>(load<float>(p)) : load<double>(p);
}

const Value& Array::nested_at(size_t k) const {
  check_element(*this, k, type_ == ValueType::kArray, "an array");
  return nested_[k];
}

std::span<const uint8_t> Array::scalar_bytes() const {
  MINFER_CHECK(scalar_size(type_) != 0, "array of %s has no scalar bytes",
               std::string(value_type_name(type_)).c_str());
  return data_;
}

Value Array::operator[](size_t k) const {
  Value v;
  v.type = type_;
  if (type_ == ValueType::kString) {
    v.str = string_at(k);
  } else if (type_ == ValueType::kArray) {
    v = nested_at(k);
  } else if (type_ == ValueType::kFloat32 || type_ == ValueType::kFloat64) {
    v.f = float_at(k);
  } else if (is_signed_type(type_)) {
    v.i = int_at(k);
  } else {
    v.u = uint_at(k);
  }
  return v;
}

Value Array::Iterator::operator*() const {
  return (*a_)[k_];
}

void Array::push_back(const Value& e) {
  MINFER_CHECK(e.type == type_, "array element #%zu has type %s, array holds %s", size(),
               std::string(value_type_name(e.type)).c_str(),
               std::string(value_type_name(type_)).c_str());
  switch (type_) {
    case ValueType::kString:
      push_string(e.str);
      return;
    case ValueType::kArray:
      nested_.push_back(e);
      break;
    case ValueType::kUint8:
      store<uint8_t>(data_, static_cast<uint8_t>(e.u));
      break;
    case ValueType::kInt8:
      store<int8_t>(data_, static_cast<int8_t>(e.i));
      break;
    case ValueType::kUint16:
      store<uint16_t>(data_, static_cast<uint16_t>(e.u));
      break;
    case ValueType::kInt16:
      store<int16_t>(data_, static_cast<int16_t>(e.i));
      break;
    case ValueType::kUint32:
      store<uint32_t>(data_, static_cast<uint32_t>(e.u));
      break;
    case ValueType::kInt32:
      store<int32_t>(data_, static_cast<int32_t>(e.i));
      break;
    case ValueType::kUint64:
      store<uint64_t>(data_, e.u);
      break;
    case ValueType::kInt64:
      store<int64_t>(data_, e.i);
      break;
    case ValueType::kFloat32:
      store<float>(data_, static_cast<float>(e.f));
      break;
    case ValueType::kFloat64:
      store<double>(data_, e.f);
      break;
    case ValueType::kBool:
      store<uint8_t>(data_, e.u != 0 ? 1 : 0);
      break;
  }
  ++size_;
}

void Array::push_string(std::string_view s) {
  MINFER_CHECK(type_ == ValueType::kString, "string pushed onto an array of %s",
               std::string(value_type_name(type_)).c_str());
  data_.insert(data_.end(), s.begin(), s.end());
  ends_.push_back(data_.size());
  ++size_;
}

void Array::reserve(size_t n) {
  if (type_ == ValueType::kString) {
    ends_.reserve(n);
  } else if (type_ == ValueType::kArray) {
    nested_.reserve(n);
  } else {
    data_.reserve(n * scalar_size(type_));
  }
}

bool Array::operator==(const Array& o) const {
  if (type_ != o.type_ || size_ != o.size_) return false;
  if (type_ == ValueType::kFloat32 || type_ == ValueType::kFloat64) {
    for (size_t k = 0; k < size(); ++k) {
      if (float_at(k) != o.float_at(k)) return false;
    }
    return true;
  }
  return data_ == o.data_ && ends_ == o.ends_ && nested_ == o.nested_;
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
                           value_type_name(v.array.type()));
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
