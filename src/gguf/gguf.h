// Stage 2 (file): GGUF v2/v3 reader (mmap, bounds-checked) and writer.
// Invariants: every count, length and offset read from a file is checked with
// overflow-safe arithmetic against the file size before use; an error names the
// field and its byte offset; tensor views point into the one MappedFile that owns
// the bytes and never outlive the File / Model that holds it.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#pragma once

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/result.h"

namespace minfer::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Acceptance limits, the same as llama.cpp's ggml/src/gguf.cpp so that a file one
// of us accepts the other accepts too.
constexpr uint64_t kMaxStringLength = 1ull << 30;   // bytes in one string
constexpr uint64_t kMaxArrayElements = 1ull << 30;  // elements in one array
constexpr size_t kMaxTensorNameLength = 63;         // GGML_MAX_NAME - 1 (NUL)
// Nested arrays (allowed by the spec, refused by llama.cpp) are read recursively;
// this bounds the stack a hostile file can make us use.
constexpr uint32_t kMaxArrayDepth = 64;
// general.alignment: llama.cpp takes any power of two; one past 1 MiB would pad every
// tensor (and a rewrite of the file) by up to 2 GiB, so it is refused here.
constexpr uint32_t kMaxAlignment = 1u << 20;

// Well-known keys.
constexpr std::string_view kKeyAlignment = "general.alignment";
constexpr std::string_view kKeySplitNo = "split.no";                       // 0-based, u16
constexpr std::string_view kKeySplitCount = "split.count";                 // u16
constexpr std::string_view kKeySplitTensorsCount = "split.tensors.count";  // i32, total

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;

// The elements of one array value, stored compactly: a GGUF vocabulary has arrays of
// 100k-260k tokens, scores and types, and one full Value per element (~100 bytes)
// would make the metadata cost more than a small model's weights. Scalar elements
// are kept at their file width, back to back (bool as 0/1); string elements as one
// byte arena plus an end offset each; nested arrays (which llama.cpp refuses) as
// Values. Elements read back as Values (`operator[]`, iteration) or, without
// building one, through the typed accessors.
class Array {
 public:
  // The special members are defined below Value (nested_ holds Values, complete only
  // there; clang's libstdc++ instantiation needs it for the inline ones).
  Array();  // empty array of u8
  explicit Array(ValueType elem_type);
  Array(const Array&);
  Array(Array&&) noexcept;
  Array& operator=(const Array&);
  Array& operator=(Array&&) noexcept;
  ~Array();

  ValueType type() const { return type_; }
  size_t size() const { return static_cast<size_t>(size_); }
  bool empty() const { return size_ == 0; }

  // Element k as a Value (a copy).
  Value operator[](size_t k) const;
  // Typed element access; each checks the element type and the index.
  std::string_view string_at(size_t k) const;  // kString
  uint64_t uint_at(size_t k) const;            // u8 / u16 / u32 / u64 / bool (0 or 1)
  int64_t int_at(size_t k) const;              // i8 / i16 / i32 / i64
  double float_at(size_t k) const;             // f32 / f64
  const Value& nested_at(size_t k) const;      // kArray
  // Scalar elements as stored in the file (little-endian, size() * element width).
  std::span<const uint8_t> scalar_bytes() const;

  // Appends an element of the array's type (a different type is a broken invariant).
  void push_back(const Value& e);
  void push_string(std::string_view s);  // kString
  void reserve(size_t n);

  class Iterator {
   public:
    using value_type = Value;
    using difference_type = std::ptrdiff_t;
    using iterator_category = std::input_iterator_tag;
    Iterator() = default;
    Iterator(const Array* a, size_t k) : a_(a), k_(k) {}
    Value operator*() const;
    Iterator& operator++() {
      ++k_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return k_ == o.k_; }

   private:
    const Array* a_ = nullptr;
    size_t k_ = 0;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

  // Element-wise, as Values compare (floats by value: NaN != NaN, 0 == -0).
  bool operator==(const Array& o) const;

 private:
  friend class Parser;
  ValueType type_ = ValueType::kUint8;
  uint64_t size_ = 0;
  std::vector<uint8_t> data_;   // scalar elements, or the bytes of every string
  std::vector<uint64_t> ends_;  // kString: end of element k in data_
  std::vector<Value> nested_;   // kArray
};

// Bytes one scalar element takes in a file (and in Array); 0 for string and array.
size_t scalar_size(ValueType t);

// One metadata value. Scalars keep their exact type; integers are stored widened
// in `i` (signed types) or `u` (unsigned types and bool), floats in `f`.
// Arrays hold elements of `array.type()` (possibly nested arrays).
struct Value {
  ValueType type = ValueType::kUint8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string str;
  Array array;

  static Value u8(uint8_t v);
  static Value i8(int8_t v);
  static Value u16(uint16_t v);
  static Value i16(int16_t v);
  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value i64(int64_t v);
  static Value f32(float v);
  static Value f64(double v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value arr(ValueType elem_type, const std::vector<Value>& elems);
  static Value arr(Array elems);
  static Value string_array(const std::vector<std::string>& v);
  static Value f32_array(const std::vector<float>& v);
  static Value i32_array(const std::vector<int32_t>& v);

  bool is_integer() const;                        // any of the 8 integer types
  bool is_float() const;                          // f32 / f64
  bool operator==(const Value&) const = default;  // exact (NaN != NaN)
  // Render for `minfer info`: scalars exactly, strings quoted/escaped, arrays
  // truncated to `max_elems` with a count.
  std::string to_display(size_t max_elems = 8) const;
};

inline Array::Array() = default;
inline Array::Array(ValueType elem_type) : type_(elem_type) {}
inline Array::Array(const Array&) = default;
inline Array::Array(Array&&) noexcept = default;
inline Array& Array::operator=(const Array&) = default;
inline Array& Array::operator=(Array&&) noexcept = default;
inline Array::~Array() = default;

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] first (fastest-varying), 1..4 entries
  DType type = DType::kF32;
  uint64_t offset = 0;  // relative to the data section of its file
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping (or the bytes given to parse)
  uint32_t split_index = 0;       // which file of a split model holds it
};

// One parsed GGUF file.
class File {
 public:
  // mmap and parse.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parse bytes the caller keeps alive (fuzzing, tests); tensor `data` points into
  // them. `name` appears in errors.
  static Result<std::unique_ptr<File>> parse(std::span<const uint8_t> bytes, std::string name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::string& name() const { return name_; }
  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  friend class Parser;
  std::unique_ptr<MappedFile> map_;
  std::string name_;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// A model: one GGUF file, or every part of a split model (`name-00001-of-0000N.gguf`
// with `split.no` / `split.count` / `split.tensors.count`) opened as one.
// Metadata comes from the first part; tensors from all parts, in part order.
// Opening any part opens the whole model: a part other than the first is
// recognised by its `split.no` and file name, and the first part is found by name.
// Checks: every part's `split.no` equals its index and `split.count` agrees;
// `split.tensors.count`, where present, equals the total tensor count; a tensor
// name appears in one part only.
class Model {
 public:
  static Result<Model> open(const std::string& path);

  const File& primary() const { return *files_.front(); }
  const std::vector<std::unique_ptr<File>>& files() const { return files_; }
  const std::vector<KeyValue>& metadata() const { return primary().metadata(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const Value* find(std::string_view key) const { return primary().find(key); }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Typed metadata getters; errors name the key and the expected/actual type.
  // Integer getters accept any integer type whose value fits.
  Result<std::string> get_string(std::string_view key) const;
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<int64_t> get_i64(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;  // any float or integer
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_f32_array(std::string_view key) const;
  Result<std::vector<int32_t>> get_i32_array(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

 private:
  std::vector<std::unique_ptr<File>> files_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

class StreamWriter;

// Writer for GGUF v3 files that llama.cpp reads. Keys keep insertion order; tensor
// data is aligned to `general.alignment` (default 32) and padded with zeros.
class Writer {
 public:
  // Replaces an existing key in place; a u32 power-of-two general.alignment also
  // sets the alignment.
  void set(std::string key, Value value);
  void set_alignment(uint64_t alignment);  // also writes general.alignment
  // Copies `data` (must be exactly the tensor's byte size for `type` and `dims`).
  Status add_tensor(std::string name, DType type, std::vector<uint64_t> dims,
                    std::span<const uint8_t> data);
  Result<std::vector<uint8_t>> to_bytes() const;
  Status write(const std::string& path) const;
  // Writes `n_parts` files `split_path(prefix, i, n_parts)`: tensors in order, split
  // as evenly as possible; the first part carries all metadata; every part carries
  // split.no / split.count / split.tensors.count (as llama.cpp's gguf-split does).
  Status write_split(const std::string& prefix, uint32_t n_parts) const;
  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
  };
  // Sizes to use in place of each tensor's data size (StreamWriter declares tensors
  // without their data).
  struct SizeOverride {
    const std::vector<uint64_t>* sizes = nullptr;
  };
  friend class StreamWriter;
  // Serialises the header (everything before the data section, padding included)
  // for `tensors` of this writer plus `kvs`; tensor data follows, each padded.
  Result<std::vector<uint8_t>> header_bytes(const std::vector<KeyValue>& kvs,
                                            std::span<const PendingTensor* const> tensors,
                                            const SizeOverride* sizes = nullptr) const;
  Status write_file(const std::string& path, const std::vector<KeyValue>& kvs,
                    std::span<const PendingTensor* const> tensors) const;
  std::vector<KeyValue> kvs_;
  std::vector<PendingTensor> tensors_;
  uint64_t alignment_ = kDefaultAlignment;
};

// A GGUF v3 file written front to back without holding the tensor data: the header
// (metadata, every tensor's info and offset) first, then each tensor's bytes in the
// declared order, each padded with zeros to the alignment (general.alignment among
// `kvs`, else 32). Writes go to `path + ".tmp"`, renamed over `path` by finish(); a
// writer destroyed before finish() removes the temporary file, so a failed run never
// leaves a half file under the final name.
class StreamWriter {
 public:
  struct TensorDecl {
    std::string name;
    DType type = DType::kF32;
    std::vector<uint64_t> dims;
  };
  static Result<std::unique_ptr<StreamWriter>> create(const std::string& path,
                                                      const std::vector<KeyValue>& kvs,
                                                      const std::vector<TensorDecl>& tensors);
  ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;
  // Appends `data` to the current tensor; the tensor is complete (and padded) once its
  // byte size is reached. Error: more bytes than the tensors declared, a write error.
  Status write(std::span<const uint8_t> data);
  // Checks that every tensor is complete, flushes, closes and renames into place.
  Status finish();
  uint64_t bytes_written() const { return written_; }

 private:
  StreamWriter() = default;
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  std::vector<uint64_t> sizes_;
  size_t current_ = 0;
  uint64_t in_tensor_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t written_ = 0;
};

// `<prefix>-%05d-of-%05d.gguf` with a 1-based part number (split_no is 0-based,
// as in the `split.no` key).
std::string split_path(std::string_view prefix, uint32_t split_no, uint32_t split_count);

// Byte size of a tensor of `type` with `dims`; error if ne[0] is not a multiple of
// the block size or the size overflows.
Result<uint64_t> tensor_nbytes(DType type, std::span<const uint64_t> dims);

}  // namespace minfer::gguf
