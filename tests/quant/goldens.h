// Stage 3 tests: reader for the goldens in tests/data/quant/ written by ggml through
// tools/quant_goldens (format documented in tools/quant_goldens/goldens.cpp).
// Invariant: a malformed or truncated file fails the reading test loudly; nothing is
// silently skipped.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/result.h"

namespace minfer::quant::test {

inline std::string golden_dir() {
  return std::string(MINFER_SOURCE_DIR) + "/tests/data/quant";
}

struct GoldenInput {
  std::string name;
  std::vector<float> x;
};

struct GoldenCase {
  std::string name;
  uint64_t n = 0;
  std::vector<uint8_t> bytes;  // ggml's reference-quantized bytes
  std::vector<float> deq;      // ggml's dequantization of `bytes`
};

struct GoldenType {
  uint32_t type_id = 0;
  std::vector<GoldenCase> cases;
};

// Bounds-checked little-endian cursor over a file's bytes.
class Cursor {
 public:
  Cursor(std::string data, std::string name) : data_(std::move(data)), name_(std::move(name)) {}
  Status take(void* dst, size_t n) {
    if (n > data_.size() - pos_) {
      return make_error(name_ + ": truncated at byte " + std::to_string(pos_));
    }
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
    return Ok{};
  }
  template <typename T>
  Result<T> pod() {
    T v{};
    MINFER_TRY_STATUS(take(&v, sizeof v));
    return v;
  }
  Result<std::string> name() {
    MINFER_TRY(uint16_t len, pod<uint16_t>());
    std::string s(len, '\0');
    MINFER_TRY_STATUS(take(s.data(), len));
    return s;
  }
  Status magic(const char* want) {
    char m[4];
    MINFER_TRY_STATUS(take(m, 4));
    if (std::memcmp(m, want, 4) != 0) return make_error(name_ + ": bad magic, want " + want);
    MINFER_TRY(uint32_t version, pod<uint32_t>());
    if (version != 1) return make_error(name_ + ": version " + std::to_string(version));
    return Ok{};
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::string data_;
  std::string name_;
  size_t pos_ = 0;
};

inline Result<std::vector<GoldenInput>> read_inputs() {
  const std::string path = golden_dir() + "/inputs.bin";
  MINFER_TRY(std::string data, read_file(path));
  Cursor c(std::move(data), path);
  MINFER_TRY_STATUS(c.magic("MQIN"));
  MINFER_TRY(uint32_t n_cases, c.pod<uint32_t>());
  std::vector<GoldenInput> out(n_cases);
  for (auto& in : out) {
    MINFER_TRY(in.name, c.name());
    MINFER_TRY(uint64_t n, c.pod<uint64_t>());
    if (n > (1u << 24)) return make_error(path + ": case too large");
    in.x.resize(n);
    MINFER_TRY_STATUS(c.take(in.x.data(), n * 4));
  }
  if (!c.at_end()) return make_error(path + ": trailing bytes");
  return out;
}

// `file_name` is ggml's type name: "q4_K.bin".
inline Result<GoldenType> read_type(const std::string& file_name) {
  const std::string path = golden_dir() + "/" + file_name;
  MINFER_TRY(std::string data, read_file(path));
  Cursor c(std::move(data), path);
  MINFER_TRY_STATUS(c.magic("MQGD"));
  GoldenType out;
  MINFER_TRY(out.type_id, c.pod<uint32_t>());
  MINFER_TRY(uint32_t n_cases, c.pod<uint32_t>());
  out.cases.resize(n_cases);
  for (auto& gc : out.cases) {
    MINFER_TRY(gc.name, c.name());
    MINFER_TRY(gc.n, c.pod<uint64_t>());
    MINFER_TRY(uint64_t n_bytes, c.pod<uint64_t>());
    if (gc.n > (1u << 24) || n_bytes > (1u << 26)) return make_error(path + ": case too large");
    gc.bytes.resize(n_bytes);
    MINFER_TRY_STATUS(c.take(gc.bytes.data(), n_bytes));
    gc.deq.resize(gc.n);
    MINFER_TRY_STATUS(c.take(gc.deq.data(), gc.n * 4));
  }
  if (!c.at_end()) return make_error(path + ": trailing bytes");
  return out;
}

// dequant_random.bin: arbitrary bytes per type and ggml's dequantization of them.
inline Result<std::vector<std::pair<uint32_t, GoldenCase>>> read_random() {
  const std::string path = golden_dir() + "/dequant_random.bin";
  MINFER_TRY(std::string data, read_file(path));
  Cursor c(std::move(data), path);
  MINFER_TRY_STATUS(c.magic("MQDR"));
  MINFER_TRY(uint32_t n_types, c.pod<uint32_t>());
  std::vector<std::pair<uint32_t, GoldenCase>> out(n_types);
  for (auto& [type_id, gc] : out) {
    MINFER_TRY(type_id, c.pod<uint32_t>());
    gc.name = "random_bytes";
    MINFER_TRY(gc.n, c.pod<uint64_t>());
    MINFER_TRY(uint64_t n_bytes, c.pod<uint64_t>());
    if (gc.n > (1u << 24) || n_bytes > (1u << 26)) return make_error(path + ": case too large");
    gc.bytes.resize(n_bytes);
    MINFER_TRY_STATUS(c.take(gc.bytes.data(), n_bytes));
    gc.deq.resize(gc.n);
    MINFER_TRY_STATUS(c.take(gc.deq.data(), gc.n * 4));
  }
  if (!c.at_end()) return make_error(path + ": trailing bytes");
  return out;
}

// FNV-1a 64 over the floats' 32-bit patterns, one word per step (as the harness).
inline uint64_t fnv1a_words(const float* x, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, &x[i], 4);
    h ^= w;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace minfer::quant::test
