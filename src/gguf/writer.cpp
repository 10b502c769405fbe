// Stage 2 (file): GGUF v3 writer (little-endian) for tests, tools and quantize.
// Invariants: every file it produces is accepted by our reader, llama.cpp and the
// Python `gguf` package (given no nested arrays, which llama.cpp refuses); tensors
// are stored in insertion order, each padded with zeros to the alignment.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/checked_math.h"
#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace minfer::gguf {

namespace {

class Buf {
 public:
  // resize + memcpy rather than insert(): GCC 12 warns falsely
  // (-Wstringop-overflow) on vector::insert of a few bytes.
  template <typename T>
  void put(T v) {
    append(&v, sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  void append(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }
  void pad_to(uint64_t align) { out_.resize((out_.size() + align - 1) / align * align, 0); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

Status put_value(Buf& b, const Value& v, const std::string& where, uint32_t depth) {
  switch (v.type) {
    case ValueType::kUint8:
      b.put<uint8_t>(static_cast<uint8_t>(v.u));
      return Ok{};
    case ValueType::kInt8:
      b.put<int8_t>(static_cast<int8_t>(v.i));
      return Ok{};
    case ValueType::kUint16:
      b.put<uint16_t>(static_cast<uint16_t>(v.u));
      return Ok{};
    case ValueType::kInt16:
      b.put<int16_t>(static_cast<int16_t>(v.i));
      return Ok{};
    case ValueType::kUint32:
      b.put<uint32_t>(static_cast<uint32_t>(v.u));
      return Ok{};
    case ValueType::kInt32:
      b.put<int32_t>(static_cast<int32_t>(v.i));
      return Ok{};
    case ValueType::kUint64:
      b.put<uint64_t>(v.u);
      return Ok{};
    case ValueType::kInt64:
      b.put<int64_t>(v.i);
      return Ok{};
    case ValueType::kFloat32:
      b.put<float>(static_cast<float>(v.f));
      return Ok{};
    case ValueType::kFloat64:
      b.put<double>(v.f);
      return Ok{};
    case ValueType::kBool:
      b.put<uint8_t>(v.u != 0 ? 1 : 0);
      return Ok{};
    case ValueType::kString:
      if (v.str.size() > kMaxStringLength) {
        return make_error(fmt::format("{}: string of {} bytes exceeds the limit of {}", where,
                                      v.str.size(), kMaxStringLength));
      }
      b.put_string(v.str);
      return Ok{};
    case ValueType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return make_error(
            fmt::format("{}: arrays nested more than {} deep", where, kMaxArrayDepth));
      }
      if (v.array.size() > kMaxArrayElements) {
        return make_error(fmt::format("{}: {} elements exceed the limit of {}", where,
                                      v.array.size(), kMaxArrayElements));
      }
      const Array& a = v.array;
      b.put<uint32_t>(static_cast<uint32_t>(a.type()));
      b.put<uint64_t>(a.size());
      if (scalar_size(a.type()) != 0) {
        // Stored at file width, little-endian, bools 0/1: the bytes go out as they are.
        const std::span<const uint8_t> raw = a.scalar_bytes();
        b.append(raw.data(), raw.size());
      } else if (a.type() == ValueType::kString) {
        for (size_t k = 0; k < a.size(); ++k) {
          const std::string_view s = a.string_at(k);
          if (s.size() > kMaxStringLength) {
            return make_error(fmt::format("{}[{}]: string of {} bytes exceeds the limit of {}",
                                          where, k, s.size(), kMaxStringLength));
          }
          b.put_string(s);
        }
      } else {
        for (size_t k = 0; k < a.size(); ++k) {
          MINFER_TRY_STATUS(
              put_value(b, a.nested_at(k), fmt::format("{}[{}]", where, k), depth + 1));
        }
      }
      return Ok{};
    }
  }
  return make_error(fmt::format("{}: value type {} is not a GGUF value type", where,
                                static_cast<uint32_t>(v.type)));
}

bool is_pow2(uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0;
}

}  // namespace

void Writer::set(std::string key, Value value) {
  // A valid general.alignment set directly works like set_alignment(); an invalid one
  // is reported by to_bytes() / write().
  if (key == kKeyAlignment && value.type == ValueType::kUint32 && is_pow2(value.u)) {
    alignment_ = value.u;
  }
  for (auto& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(KeyValue{std::move(key), std::move(value)});
}

void Writer::set_alignment(uint64_t alignment) {
  MINFER_CHECK(is_pow2(alignment) && alignment <= UINT32_MAX,
               "alignment %llu is not a power of two that fits in u32",
               static_cast<unsigned long long>(alignment));
  alignment_ = alignment;
  set(std::string(kKeyAlignment), Value::u32(static_cast<uint32_t>(alignment)));
}

Status Writer::add_tensor(std::string name, DType type, std::vector<uint64_t> dims,
                          std::span<const uint8_t> data) {
  if (std::string why = detail::tensor_name_problem(name); !why.empty()) {
    return make_error("add_tensor: " + why);
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return make_error("add_tensor: duplicate tensor name '" + name + "'");
  }
  if (dims.empty() || dims.size() > kMaxDims) {
    return make_error(
        fmt::format("add_tensor '{}': {} dims, expected 1..{}", name, dims.size(), kMaxDims));
  }
  auto nbytes = tensor_nbytes(type, dims);
  if (!nbytes.ok()) return nbytes.error().context("add_tensor '" + name + "'");
  if (nbytes.value() != data.size()) {
    return make_error(
        fmt::format("add_tensor '{}': {} bytes of data, but type {} with these dims "
                    "takes {}",
                    name, data.size(), dtype_name(type), nbytes.value()));
  }
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(dims),
                                   std::vector<uint8_t>(data.begin(), data.end())});
  return Ok{};
}

Result<std::vector<uint8_t>> Writer::header_bytes(const std::vector<KeyValue>& kvs,
                                                  std::span<const PendingTensor* const> tensors,
                                                  const SizeOverride* sizes) const {
  uint64_t align = alignment_;
  std::set<std::string_view> seen;
  for (const auto& kv : kvs) {
    if (std::string why = detail::key_problem(kv.key); !why.empty()) {
      return make_error("gguf writer: " + why);
    }
    if (!seen.insert(kv.key).second) {
      return make_error("gguf writer: duplicate key '" + kv.key + "'");
    }
    if (kv.key == kKeyAlignment) {
      if (kv.value.type != ValueType::kUint32 || !is_pow2(kv.value.u)) {
        return make_error(fmt::format("gguf writer: '{}' must be a u32 power of two, got {} {}",
                                      kKeyAlignment, value_type_name(kv.value.type),
                                      kv.value.to_display()));
      }
      align = kv.value.u;
    }
  }
  if (align != alignment_) {
    return make_error(
        fmt::format("gguf writer: '{}' is {} but the writer aligns to {} (use "
                    "set_alignment)",
                    kKeyAlignment, align, alignment_));
  }
  Buf b;
  b.put<uint32_t>(kMagic);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors.size());
  b.put<uint64_t>(kvs.size());
  for (const auto& kv : kvs) {
    b.put_string(kv.key);
    b.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    MINFER_TRY_STATUS(put_value(b, kv.value, "key '" + kv.key + "'", 0));
  }
  uint64_t offset = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const PendingTensor* t = tensors[k];
    const uint64_t data_size = sizes != nullptr ? (*sizes->sizes)[k] : t->data.size();
    b.put_string(t->name);
    b.put<uint32_t>(static_cast<uint32_t>(t->dims.size()));
    for (uint64_t d : t->dims) b.put<uint64_t>(d);
    b.put<uint32_t>(static_cast<uint32_t>(t->type));
    b.put<uint64_t>(offset);
    uint64_t padded = 0;
    if (!checked_align_up(data_size, align, &padded) || !checked_add(offset, padded, &offset)) {
      return make_error("gguf writer: data section size overflows");
    }
  }
  b.pad_to(align);
  return std::move(b.bytes());
}

Result<std::vector<uint8_t>> Writer::to_bytes() const {
  std::vector<const PendingTensor*> ts;
  for (const auto& t : tensors_) ts.push_back(&t);
  MINFER_TRY(std::vector<uint8_t> out, header_bytes(kvs_, ts));
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  }
  return out;
}

Status Writer::write_file(const std::string& path, const std::vector<KeyValue>& kvs,
                          std::span<const PendingTensor* const> tensors) const {
  MINFER_TRY(std::vector<uint8_t> header, header_bytes(kvs, tensors));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return make_error("cannot create '" + path + "': " + std::strerror(errno));
  }
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  static const uint8_t kZeros[256] = {};
  for (const PendingTensor* t : tensors) {
    if (!ok) break;
    ok = std::fwrite(t->data.data(), 1, t->data.size(), f) == t->data.size();
    uint64_t pad = (alignment_ - t->data.size() % alignment_) % alignment_;
    while (ok && pad > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
      ok = std::fwrite(kZeros, 1, n, f) == n;
      pad -= n;
    }
  }
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    return make_error("cannot write '" + path + "': " + std::strerror(ok ? errno : err));
  }
  return Ok{};
}

Status Writer::write(const std::string& path) const {
  std::vector<const PendingTensor*> ts;
  for (const auto& t : tensors_) ts.push_back(&t);
  return write_file(path, kvs_, ts);
}

Status Writer::write_split(const std::string& prefix, uint32_t n_parts) const {
  if (n_parts == 0 || n_parts > UINT16_MAX) {
    return make_error(fmt::format("write_split: {} parts, expected 1..{}", n_parts, UINT16_MAX));
  }
  if (tensors_.size() > static_cast<size_t>(INT32_MAX)) {
    return make_error("write_split: too many tensors for split.tensors.count (i32)");
  }
  const size_t n = tensors_.size();
  for (uint32_t part = 0; part < n_parts; ++part) {
    std::vector<KeyValue> kvs;
    if (part == 0) {
      for (const auto& kv : kvs_) {
        if (kv.key != kKeySplitNo && kv.key != kKeySplitCount && kv.key != kKeySplitTensorsCount) {
          kvs.push_back(kv);
        }
      }
    } else if (const auto it =
                   std::find_if(kvs_.begin(), kvs_.end(),
                                [](const KeyValue& kv) { return kv.key == kKeyAlignment; });
               it != kvs_.end()) {
      kvs.push_back(*it);  // every part's data section uses the same alignment
    }
    kvs.push_back({std::string(kKeySplitNo), Value::u16(static_cast<uint16_t>(part))});
    kvs.push_back({std::string(kKeySplitCount), Value::u16(static_cast<uint16_t>(n_parts))});
    kvs.push_back({std::string(kKeySplitTensorsCount), Value::i32(static_cast<int32_t>(n))});
    std::vector<const PendingTensor*> ts;
    for (size_t k = n * part / n_parts; k < n * (part + 1) / n_parts; ++k)
      ts.push_back(&tensors_[k]);
    MINFER_TRY_STATUS(write_file(split_path(prefix, part, n_parts), kvs, ts));
  }
  return Ok{};
}

std::string split_path(std::string_view prefix, uint32_t split_no, uint32_t split_count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, split_no + 1, split_count);
}

Result<std::unique_ptr<StreamWriter>> StreamWriter::create(const std::string& path,
                                                           const std::vector<KeyValue>& kvs,
                                                           const std::vector<TensorDecl>& tensors) {
  // The header is the Writer's, built from declarations with empty data.
  Writer w;
  for (const auto& kv : kvs) {
    if (kv.key == kKeyAlignment) {
      if (kv.value.type != ValueType::kUint32 || !is_pow2(kv.value.u)) {
        return make_error(
            fmt::format("gguf writer: '{}' must be a u32 power of two", kKeyAlignment));
      }
      w.alignment_ = kv.value.u;
    }
  }
  std::vector<Writer::PendingTensor> decl;
  decl.reserve(tensors.size());
  std::vector<uint64_t> sizes;
  std::set<std::string_view> names;
  for (const auto& t : tensors) {
    if (std::string why = detail::tensor_name_problem(t.name); !why.empty()) {
      return make_error("gguf writer: " + why);
    }
    if (!names.insert(t.name).second) {
      return make_error("gguf writer: duplicate tensor name '" + t.name + "'");
    }
    if (t.dims.empty() || t.dims.size() > kMaxDims) {
      return make_error(fmt::format("gguf writer: tensor '{}' has {} dims, expected 1..{}", t.name,
                                    t.dims.size(), kMaxDims));
    }
    auto nbytes = tensor_nbytes(t.type, t.dims);
    if (!nbytes.ok()) return nbytes.error().context("gguf writer: tensor '" + t.name + "'");
    sizes.push_back(nbytes.value());
    decl.push_back(Writer::PendingTensor{t.name, t.type, t.dims, {}});
  }
  std::vector<const Writer::PendingTensor*> ptrs;
  for (const auto& d : decl) ptrs.push_back(&d);
  Writer::SizeOverride sizes_for_header{&sizes};
  MINFER_TRY(std::vector<uint8_t> header, w.header_bytes(kvs, ptrs, &sizes_for_header));
  std::unique_ptr<StreamWriter> sw(new StreamWriter());
  sw->path_ = path;
  sw->tmp_ = path + ".tmp";
  sw->sizes_ = std::move(sizes);
  sw->alignment_ = w.alignment_;
  sw->f_ = std::fopen(sw->tmp_.c_str(), "wb");
  if (sw->f_ == nullptr) {
    return make_error("cannot create '" + sw->tmp_ + "': " + std::strerror(errno));
  }
  if (std::fwrite(header.data(), 1, header.size(), sw->f_) != header.size()) {
    return make_error("cannot write '" + sw->tmp_ + "': " + std::strerror(errno));
  }
  sw->written_ = header.size();
  // Zero-sized tensors are complete from the start.
  while (sw->current_ < sw->sizes_.size() && sw->sizes_[sw->current_] == 0) ++sw->current_;
  return sw;
}

StreamWriter::~StreamWriter() {
  if (f_ != nullptr) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

Status StreamWriter::write(std::span<const uint8_t> data) {
  static const uint8_t kZeros[256] = {};
  size_t at = 0;
  while (at < data.size()) {
    if (current_ >= sizes_.size()) {
      return make_error(
          fmt::format("gguf writer: {} bytes beyond the declared tensors", data.size() - at));
    }
    const uint64_t left = sizes_[current_] - in_tensor_;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, data.size() - at));
    if (std::fwrite(data.data() + at, 1, n, f_) != n) {
      return make_error("cannot write '" + tmp_ + "': " + std::strerror(errno));
    }
    at += n;
    in_tensor_ += n;
    written_ += n;
    if (in_tensor_ == sizes_[current_]) {
      uint64_t pad = (alignment_ - sizes_[current_] % alignment_) % alignment_;
      while (pad > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
        if (std::fwrite(kZeros, 1, k, f_) != k) {
          return make_error("cannot write '" + tmp_ + "': " + std::strerror(errno));
        }
        pad -= k;
        written_ += k;
      }
      in_tensor_ = 0;
      ++current_;
      while (current_ < sizes_.size() && sizes_[current_] == 0) ++current_;
    }
  }
  return Ok{};
}

Status StreamWriter::finish() {
  if (f_ == nullptr) return make_error("gguf writer: finish() called twice");
  if (current_ < sizes_.size()) {
    return make_error(
        fmt::format("gguf writer: {} of {} tensors written", current_, sizes_.size()));
  }
  const bool flushed = std::fflush(f_) == 0;
  const int err = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!flushed || !closed) {
    std::remove(tmp_.c_str());
    return make_error("cannot write '" + tmp_ + "': " + std::strerror(flushed ? errno : err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp_.c_str());
    return make_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(e));
  }
  return Ok{};
}

}  // namespace minfer::gguf
