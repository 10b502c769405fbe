// Stage 2 (file): GGUF v2/v3 parser over bytes held by the caller or by a MappedFile.
// Invariants: no read, allocation or pointer is formed before the bytes it needs are
// proven to exist (overflow-safe arithmetic against the file size); every error names
// the field and its byte offset. Acceptance rules follow llama.cpp's ggml/src/gguf.cpp
// (versions, limits, alignment, in-order tensor data) plus stricter name checks.
#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "core/checked_math.h"
#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace minfer::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader reads little-endian fields with memcpy");

namespace {

// Smallest encoding of one element of each value type, used to reject counts that
// cannot fit in the bytes left before anything is allocated for them.
uint64_t min_encoded_size(ValueType t) {
  if (const size_t n = scalar_size(t); n > 0) return n;  // a scalar: its width
  switch (t) {
    case ValueType::kString:
      return 8;  // u64 length, then the bytes
    case ValueType::kArray:
      return 12;  // u32 element type + u64 count
    default:
      return 1;
  }
}

bool is_known_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::kFloat64);
}

// Minimum bytes of one key/value pair (u64 key length, 1-byte key, u32 type, 1-byte
// value) and of one tensor info (u64 name length, 1-byte name, u32 n_dims, one u64
// dim, u32 type, u64 offset).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

}  // namespace

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& name)
      : p_(bytes.data()), size_(bytes.size()), name_(name) {}

  Status run(File& f);

 private:
  // An error in the current context ("metadata key #2 'a.b' (at byte 40)").
  Error fail(const std::string& what) const {
    std::string msg = name_ + ": ";
    if (!ctx_.empty()) msg += ctx_ + ": ";
    return make_error(msg + what);
  }
  uint64_t remaining() const { return size_ - pos_; }

  // Ensure `n` bytes for `field` exist at pos_.
  Status need(uint64_t n, std::string_view field) const {
    if (n > remaining()) {
      return fail(
          fmt::format("{} at byte {} needs {} bytes but the file ends at byte {} "
                      "(truncated?)",
                      field, pos_, n, size_));
    }
    return Ok{};
  }

  template <typename T>
  Result<T> read(std::string_view field) {
    MINFER_TRY_STATUS(need(sizeof(T), field));
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> read_string(std::string_view field) {
    const uint64_t at = pos_;
    MINFER_TRY(uint64_t len, read<uint64_t>(fmt::format("{} length", field)));
    if (len > kMaxStringLength) {
      return fail(fmt::format("{} length {} (at byte {}) exceeds the limit of {} bytes", field, len,
                              at, kMaxStringLength));
    }
    if (len > remaining()) {
      return fail(
          fmt::format("{} length {} (at byte {}) runs past end of file: only {} bytes "
                      "remain (file size {})",
                      field, len, at, remaining(), size_));
    }
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  Result<Value> read_value(ValueType type, uint32_t depth, const std::string& field);
  // The `count` elements of array `a` (its type set, the count checked against the
  // bytes left), stored compactly.
  Status read_array(Array& a, uint64_t count, uint32_t depth, const std::string& field);
  // Length and bytes of string element `index` of array `field`, checked as
  // read_string checks them; the bytes stay in the file.
  Result<std::string_view> read_element_string(const std::string& field, uint64_t index);
  Status read_header(File& f, uint64_t* n_tensors, uint64_t* n_kv);
  Status read_metadata(File& f, uint64_t n_kv);
  Status read_tensor_infos(File& f, uint64_t n_tensors, std::vector<uint64_t>* info_pos);
  Status place_tensor_data(File& f, const std::vector<uint64_t>& info_pos);

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
  std::string ctx_;
};

Result<Value> Parser::read_value(ValueType type, uint32_t depth, const std::string& field) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::kUint8: {
      MINFER_TRY(v.u, read<uint8_t>(field));
      return v;
    }
    case ValueType::kInt8: {
      MINFER_TRY(v.i, read<int8_t>(field));
      return v;
    }
    case ValueType::kUint16: {
      MINFER_TRY(v.u, read<uint16_t>(field));
      return v;
    }
    case ValueType::kInt16: {
      MINFER_TRY(v.i, read<int16_t>(field));
      return v;
    }
    case ValueType::kUint32: {
      MINFER_TRY(v.u, read<uint32_t>(field));
      return v;
    }
    case ValueType::kInt32: {
      MINFER_TRY(v.i, read<int32_t>(field));
      return v;
    }
    case ValueType::kUint64: {
      MINFER_TRY(v.u, read<uint64_t>(field));
      return v;
    }
    case ValueType::kInt64: {
      MINFER_TRY(v.i, read<int64_t>(field));
      return v;
    }
    case ValueType::kFloat32: {
      MINFER_TRY(float x, read<float>(field));
      v.f = x;
      return v;
    }
    case ValueType::kFloat64: {
      MINFER_TRY(v.f, read<double>(field));
      return v;
    }
    case ValueType::kBool: {
      // llama.cpp reads any nonzero byte as true; so do we.
      MINFER_TRY(uint8_t b, read<uint8_t>(field));
      v.u = b != 0 ? 1 : 0;
      return v;
    }
    case ValueType::kString: {
      MINFER_TRY(v.str, read_string(field));
      return v;
    }
    case ValueType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return fail(fmt::format("{} at byte {}: arrays nested more than {} deep", field, pos_,
                                kMaxArrayDepth));
      }
      const uint64_t type_at = pos_;
      MINFER_TRY(uint32_t et, read<uint32_t>(field + " array element type"));
      if (!is_known_value_type(et)) {
        return fail(fmt::format("{} array element type {} (at byte {}) is not a GGUF value type",
                                field, et, type_at));
      }
      const auto elem_type = static_cast<ValueType>(et);
      const uint64_t count_at = pos_;
      MINFER_TRY(uint64_t count, read<uint64_t>(field + " array count"));
      if (count > kMaxArrayElements) {
        return fail(fmt::format("{} array count {} (at byte {}) exceeds the limit of {}", field,
                                count, count_at, kMaxArrayElements));
      }
      uint64_t min_bytes = 0;
      if (!checked_mul(count, min_encoded_size(elem_type), &min_bytes) || min_bytes > remaining()) {
        return fail(
            fmt::format("{} array count {} (at byte {}) of {} needs at least {} bytes "
                        "per element but only {} bytes remain (file size {})",
                        field, count, count_at, value_type_name(elem_type),
                        min_encoded_size(elem_type), remaining(), size_));
      }
      v.array = Array(elem_type);
      MINFER_TRY_STATUS(read_array(v.array, count, depth, field));
      return v;
    }
  }
  return fail(fmt::format("{}: value type {} is not a GGUF value type", field,
                          static_cast<uint32_t>(type)));
}

Result<std::string_view> Parser::read_element_string(const std::string& field, uint64_t index) {
  // The field name is formatted only for an error: a vocabulary has 100k+ elements.
  const uint64_t at = pos_;
  if (remaining() < sizeof(uint64_t)) {
    return fail(
        fmt::format("{}[{}] length at byte {} needs {} bytes but the file ends at byte {} "
                    "(truncated?)",
                    field, index, pos_, sizeof(uint64_t), size_));
  }
  uint64_t len = 0;
  std::memcpy(&len, p_ + pos_, sizeof len);
  pos_ += sizeof len;
  if (len > kMaxStringLength) {
    return fail(fmt::format("{}[{}] length {} (at byte {}) exceeds the limit of {} bytes", field,
                            index, len, at, kMaxStringLength));
  }
  if (len > remaining()) {
    return fail(
        fmt::format("{}[{}] length {} (at byte {}) runs past end of file: only {} bytes "
                    "remain (file size {})",
                    field, index, len, at, remaining(), size_));
  }
  std::string_view s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
  pos_ += len;
  return s;
}

Status Parser::read_array(Array& a, uint64_t count, uint32_t depth, const std::string& field) {
  const ValueType t = a.type_;
  if (const uint64_t width = scalar_size(t); width != 0) {
    // The caller checked count * width <= remaining(); the elements are copied as the
    // file stores them, bools made 0/1 (llama.cpp reads any nonzero byte as true).
    const uint64_t n_bytes = count * width;
    a.data_.assign(p_ + pos_, p_ + pos_ + n_bytes);
    if (t == ValueType::kBool) {
      for (uint8_t& b : a.data_) b = b != 0 ? 1 : 0;
    }
    pos_ += n_bytes;
    a.size_ = count;
    return Ok{};
  }
  if (t == ValueType::kString) {
    // Two passes: check every length and sum them, then copy into one arena of exactly
    // that size (no regrowth, so no transient copy of a large vocabulary).
    const uint64_t start = pos_;
    uint64_t total = 0;
    for (uint64_t k = 0; k < count; ++k) {
      MINFER_TRY(std::string_view s, read_element_string(field, k));
      total += s.size();  // <= the file size, no overflow
    }
    pos_ = start;
    a.data_.reserve(static_cast<size_t>(total));
    a.ends_.reserve(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k) {
      MINFER_TRY(std::string_view s, read_element_string(field, k));
      a.push_string(s);
    }
    return Ok{};
  }
  a.nested_.reserve(static_cast<size_t>(count));
  for (uint64_t k = 0; k < count; ++k) {
    MINFER_TRY(Value e, read_value(t, depth + 1, fmt::format("{}[{}]", field, k)));
    a.nested_.push_back(std::move(e));
  }
  a.size_ = count;
  return Ok{};
}

Status Parser::read_header(File& f, uint64_t* n_tensors, uint64_t* n_kv) {
  MINFER_TRY(uint32_t magic, read<uint32_t>("magic"));
  if (magic != kMagic) {
    std::string shown;
    for (int k = 0; k < 4; ++k) {
      const auto c = static_cast<unsigned char>(magic >> (8 * k));
      shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    return fail(
        fmt::format("bad magic at byte 0: '{}' (0x{:08x}), expected 'GGUF' — not a "
                    "GGUF file",
                    shown, magic));
  }
  MINFER_TRY(uint32_t version, read<uint32_t>("version"));
  // A big-endian file's version reads byte-swapped here (3 → 0x03000000): its low
  // 16 bits are zero, which no real version has.
  if (version != 0 && (version & 0xFFFFu) == 0) {
    return fail(
        fmt::format("version at byte 4 reads as {} (0x{:08x}): this looks like a "
                    "big-endian GGUF file, which is not supported",
                    version, version));
  }
  if (version == 1) {
    return fail("version at byte 4 is 1: GGUF v1 is not supported (re-convert the model to v3)");
  }
  if (version != 2 && version != 3) {
    return fail(
        fmt::format("version at byte 4 is {}: only GGUF versions 2 and 3 are supported", version));
  }
  f.version_ = version;
  MINFER_TRY(*n_tensors, read<uint64_t>("tensor count"));
  MINFER_TRY(*n_kv, read<uint64_t>("metadata key/value count"));
  // Counts are int64 in llama.cpp; each entry takes at least a few bytes, so a count
  // is also bounded by what is left of the file.
  uint64_t need_kv = 0, need_t = 0, need_all = 0;
  if (!checked_mul(*n_kv, kMinKvBytes, &need_kv) || need_kv > remaining()) {
    return fail(
        fmt::format("metadata key/value count {} (at byte 16) cannot fit: each takes at "
                    "least {} bytes and only {} bytes remain",
                    *n_kv, kMinKvBytes, remaining()));
  }
  if (!checked_mul(*n_tensors, kMinTensorInfoBytes, &need_t) ||
      !checked_add(need_kv, need_t, &need_all) || need_all > remaining()) {
    return fail(
        fmt::format("tensor count {} (at byte 8) cannot fit: each tensor info takes at "
                    "least {} bytes and only {} bytes remain",
                    *n_tensors, kMinTensorInfoBytes, remaining()));
  }
  return Ok{};
}

Status Parser::read_metadata(File& f, uint64_t n_kv) {
  f.kvs_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = pos_;
    ctx_ = fmt::format("metadata key #{} (at byte {})", k, at);
    MINFER_TRY(std::string key, read_string("key"));
    if (std::string why = detail::key_problem(key); !why.empty()) return fail(why);
    ctx_ = fmt::format("metadata key #{} {} (at byte {})", k, detail::quote_for_error(key), at);
    if (f.kv_index_.count(key) != 0) {
      return fail(fmt::format("duplicate key (first defined as key #{})", f.kv_index_[key]));
    }
    const uint64_t type_at = pos_;
    MINFER_TRY(uint32_t type, read<uint32_t>("value type"));
    if (!is_known_value_type(type)) {
      return fail(
          fmt::format("value type {} (at byte {}) is not a GGUF value type", type, type_at));
    }
    MINFER_TRY(Value v, read_value(static_cast<ValueType>(type), 0, "value"));
    f.kv_index_.emplace(key, f.kvs_.size());
    f.kvs_.push_back(KeyValue{std::move(key), std::move(v)});
  }
  ctx_.clear();
  if (const Value* a = f.find(kKeyAlignment)) {
    if (a->type != ValueType::kUint32) {
      return fail(fmt::format("key '{}' must have type u32 but has type {}", kKeyAlignment,
                              value_type_name(a->type)));
    }
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return fail(
          fmt::format("key '{}' is {}, which is not a nonzero power of two", kKeyAlignment, a->u));
    }
    if (a->u > kMaxAlignment) {
      return fail(fmt::format("key '{}' is {}, past the limit of {} bytes", kKeyAlignment, a->u,
                              kMaxAlignment));
    }
    f.alignment_ = a->u;
  }
  return Ok{};
}

Status Parser::read_tensor_infos(File& f, uint64_t n_tensors, std::vector<uint64_t>* info_pos) {
  f.tensors_.reserve(static_cast<size_t>(n_tensors));
  info_pos->reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = pos_;
    ctx_ = fmt::format("tensor info #{} (at byte {})", k, at);
    TensorInfo t;
    MINFER_TRY(t.name, read_string("tensor name"));
    if (std::string why = detail::tensor_name_problem(t.name); !why.empty()) return fail(why);
    ctx_ = fmt::format("tensor {} (tensor info #{} at byte {})", detail::quote_for_error(t.name), k,
                       at);
    if (f.tensor_index_.count(t.name) != 0) {
      return fail(fmt::format("duplicate tensor name (first defined as tensor info #{})",
                              f.tensor_index_[t.name]));
    }
    const uint64_t ndims_at = pos_;
    MINFER_TRY(uint32_t n_dims, read<uint32_t>("n_dims"));
    // llama.cpp also takes n_dims 0 as a one-element tensor, but no writer emits it
    // (ggml_n_dims() >= 1); we refuse it so that `dims` always has 1..4 entries.
    if (n_dims == 0 || n_dims > kMaxDims) {
      return fail(
          fmt::format("n_dims {} (at byte {}) must be in 1..{}", n_dims, ndims_at, kMaxDims));
    }
    t.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos_;
      MINFER_TRY(t.dims[d], read<uint64_t>(fmt::format("dim {}", d)));
      // ggml stores dims as int64; a dim of 0 is allowed (an empty tensor).
      if (t.dims[d] > static_cast<uint64_t>(INT64_MAX)) {
        return fail(
            fmt::format("dim {} is {} (at byte {}), more than INT64_MAX", d, t.dims[d], dim_at));
      }
    }
    const uint64_t type_at = pos_;
    MINFER_TRY(uint32_t type_id, read<uint32_t>("tensor type"));
    auto info = dtype_info(type_id);
    if (!info) {
      return fail(
          fmt::format("tensor type {} (at byte {}) is not a known ggml type", type_id, type_at));
    }
    t.type = info->type;
    auto nbytes = tensor_nbytes(t.type, t.dims);
    if (!nbytes.ok()) return fail(nbytes.error().message);
    t.n_bytes = nbytes.value();
    t.n_elements = t.n_bytes / info->type_size * info->block_size;
    MINFER_TRY(t.offset, read<uint64_t>("data offset"));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
    info_pos->push_back(at);
  }
  ctx_.clear();
  return Ok{};
}

Status Parser::place_tensor_data(File& f, const std::vector<uint64_t>& info_pos) {
  const uint64_t a = f.alignment_;
  if (f.tensors_.empty()) {
    f.data_offset_ = pos_;  // as llama.cpp: no padding is needed after an empty list
    return Ok{};
  }
  uint64_t data_offset = 0;
  if (!checked_align_up(pos_, a, &data_offset) || data_offset > size_) {
    return fail(
        fmt::format("data section: tensor infos end at byte {}; aligned to {} the data "
                    "would start past end of file (size {})",
                    pos_, a, size_));
  }
  f.data_offset_ = data_offset;
  // llama.cpp requires the tensors to be stored in info order, each padded to the
  // alignment, with no gaps; this also rules out overlap.
  uint64_t expected = 0;
  for (size_t k = 0; k < f.tensors_.size(); ++k) {
    TensorInfo& t = f.tensors_[k];
    ctx_ = fmt::format("tensor {} (tensor info #{} at byte {})", detail::quote_for_error(t.name), k,
                       info_pos[k]);
    if (t.offset % a != 0) {
      return fail(
          fmt::format("data offset 0x{:x} is not a multiple of the alignment {}", t.offset, a));
    }
    uint64_t begin = 0, end = 0, padded = 0;
    if (!checked_add(data_offset, t.offset, &begin) || !checked_add(begin, t.n_bytes, &end) ||
        end > size_) {
      return fail(
          fmt::format("data [offset 0x{:x}, size {}] extends past end of file (size {}, "
                      "data section at byte {})",
                      t.offset, t.n_bytes, size_, data_offset));
    }
    if (t.offset < expected) {
      return fail(fmt::format(
          "data [offset 0x{:x}, size {}] overlaps the previous tensor {} "
          "(its padded data ends at offset 0x{:x})",
          t.offset, t.n_bytes, detail::quote_for_error(f.tensors_[k - 1].name), expected));
    }
    if (t.offset != expected) {
      return fail(
          fmt::format("data offset 0x{:x} leaves a gap: expected 0x{:x} (tensors are "
                      "stored in order, each padded to {} bytes)",
                      t.offset, expected, a));
    }
    t.data = p_ + begin;
    if (!checked_align_up(t.n_bytes, a, &padded) || !checked_add(expected, padded, &expected)) {
      return fail("data section size overflows");
    }
  }
  ctx_.clear();
  return Ok{};
}

Status Parser::run(File& f) {
  f.size_ = size_;
  uint64_t n_tensors = 0, n_kv = 0;
  MINFER_TRY_STATUS(read_header(f, &n_tensors, &n_kv));
  MINFER_TRY_STATUS(read_metadata(f, n_kv));
  std::vector<uint64_t> info_pos;
  MINFER_TRY_STATUS(read_tensor_infos(f, n_tensors, &info_pos));
  return place_tensor_data(f, info_pos);
}

Result<std::unique_ptr<File>> File::parse(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<File> f(new File());
  f->name_ = std::move(name);
  Parser parser(bytes, f->name_);
  MINFER_TRY_STATUS(parser.run(*f));
  return f;
}

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  MINFER_TRY(auto map, MappedFile::open(path));
  MINFER_TRY(auto f, parse(map->bytes(), path));
  f->map_ = std::move(map);  // the views now point into the mapping this File owns
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<uint64_t> tensor_nbytes(DType type, std::span<const uint64_t> dims) {
  const DTypeInfo& info = dtype_info(type);
  const uint64_t ne0 = dims.empty() ? 1 : dims[0];
  if (ne0 % info.block_size != 0) {
    return make_error(fmt::format("type {}: ne[0] = {} is not a multiple of the block size {}",
                                  info.name, ne0, info.block_size));
  }
  uint64_t n = 1;
  bool empty = false;
  for (uint64_t d : dims) empty = empty || d == 0;
  // As in ggml, an empty tensor is valid whatever its other dims are.
  for (uint64_t d : empty ? std::span<const uint64_t>() : dims) {
    if (!checked_mul(n, d, &n) || n >= static_cast<uint64_t>(INT64_MAX)) {
      std::string shape;
      for (uint64_t x : dims) shape += (shape.empty() ? "" : ", ") + std::to_string(x);
      return make_error(fmt::format("element count of shape [{}] overflows int64", shape));
    }
  }
  if (empty) n = 0;
  uint64_t bytes = 0;
  if (!checked_mul(n / info.block_size, info.type_size, &bytes)) {
    return make_error(fmt::format("byte size of {} elements of type {} overflows", n, info.name));
  }
  return bytes;
}

}  // namespace minfer::gguf
