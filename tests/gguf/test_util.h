// Stage 2 tests: helpers to build GGUF files byte by byte (valid or broken) and to
// write temporary files.
// Invariant: RawGguf writes exactly the bytes it is told; it never validates.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace minfer::gguf::testing {

class RawGguf {
 public:
  RawGguf& u8(uint8_t v) { return raw(&v, 1); }
  RawGguf& u32(uint32_t v) { return raw(&v, 4); }
  RawGguf& u64(uint64_t v) { return raw(&v, 8); }
  RawGguf& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  RawGguf& raw(const void* p, size_t n) {
    const size_t at = b.size();
    b.resize(at + n);
    if (n > 0) std::memcpy(b.data() + at, p, n);
    return *this;
  }
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  // key + u32 value
  RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  RawGguf& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  // name, n_dims, dims, type, offset
  RawGguf& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  RawGguf& pad(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  std::vector<uint8_t> b;
};

inline std::string temp_dir() {
  std::string tmpl = ::testing::TempDir() + "gguf_test_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* d = ::mkdtemp(buf.data());
  return d != nullptr ? std::string(d) : std::string();
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  if (!b.empty()) std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

}  // namespace minfer::gguf::testing
