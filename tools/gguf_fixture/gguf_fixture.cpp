// Tools (stage 2 helper): writes a sample GGUF with every value type and several
// tensor types, and dumps any GGUF (or split model) as JSON, so that tests can
// compare our reader and writer with the Python `gguf` package.
// Invariant: `dump` prints values exactly (integers as integers, floats as doubles).
//
//   gguf_fixture write OUT.gguf            sample file (alignment 64)
//   gguf_fixture write-split PREFIX N      the same tensors split into N parts
//   gguf_fixture dump IN.gguf              JSON on stdout; exit 1 with the error
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/json.h"

namespace {

using minfer::DType;
using minfer::gguf::Value;
using minfer::gguf::ValueType;
using minfer::gguf::Writer;

// Deterministic bytes for tensor data (xorshift).
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return out;
}

int fill_sample(Writer& w) {
  w.set_alignment(64);
  w.set("general.architecture", Value::string("llama"));
  w.set("general.name", Value::string("fixture \"quoted\" ünïcødé 日本"));
  w.set("t.u8", Value::u8(255));
  w.set("t.i8", Value::i8(-128));
  w.set("t.u16", Value::u16(65535));
  w.set("t.i16", Value::i16(-32768));
  w.set("t.u32", Value::u32(4294967295u));
  w.set("t.i32", Value::i32(-2147483647 - 1));
  w.set("t.u64", Value::u64(18446744073709551615ull));
  w.set("t.i64", Value::i64(-9223372036854775807ll - 1));
  w.set("t.f32", Value::f32(0.1f));
  w.set("t.f64", Value::f64(-1.0e-300));
  w.set("t.bool", Value::boolean(true));
  w.set("t.bool_false", Value::boolean(false));
  w.set("t.str_empty", Value::string(""));
  w.set("t.arr_u8", Value::arr(ValueType::kUint8, {Value::u8(0), Value::u8(1), Value::u8(255)}));
  w.set("t.arr_i16", Value::arr(ValueType::kInt16, {Value::i16(-5), Value::i16(7)}));
  w.set("t.arr_u64", Value::arr(ValueType::kUint64, {Value::u64(1ull << 63)}));
  w.set("t.arr_i64", Value::arr(ValueType::kInt64, {Value::i64(-1), Value::i64(1)}));
  w.set("t.arr_f64", Value::arr(ValueType::kFloat64, {Value::f64(3.5), Value::f64(-0.25)}));
  w.set("t.arr_bool", Value::arr(ValueType::kBool, {Value::boolean(true), Value::boolean(false)}));
  w.set("t.arr_f32", Value::f32_array({1.5f, -2.25f, 1e-7f}));
  w.set("t.arr_i32", Value::i32_array({-1, 0, 2147483647}));
  w.set("t.arr_str", Value::string_array({"a", "", "bc\n", "ü"}));
  w.set("t.arr_empty", Value::arr(ValueType::kUint32, {}));
  w.set("t.arr_nested",
        Value::arr(ValueType::kArray, {Value::i32_array({1, 2}), Value::i32_array({3})}));
  struct T {
    const char* name;
    DType type;
    std::vector<uint64_t> dims;
  };
  const T tensors[] = {
      {"token_embd.weight", DType::kF32, {8, 3}},
      {"blk.0.attn_q.weight", DType::kF16, {16, 2}},
      {"blk.0.ffn_up.weight", DType::kQ8_0, {64, 2}},
      {"blk.0.ffn_down.weight", DType::kQ4_K, {256, 1}},
      {"blk.0.attn_norm.weight", DType::kBF16, {5}},
      {"blk.0.ids", DType::kI32, {3, 1, 2}},
      {"output.weight", DType::kQ6_K, {256, 2, 1, 1}},
  };
  uint32_t seed = 1;
  for (const T& t : tensors) {
    auto n = minfer::gguf::tensor_nbytes(t.type, t.dims);
    if (!n.ok()) {
      std::fprintf(stderr, "%s\n", n.error().message.c_str());
      return 1;
    }
    auto st = w.add_tensor(t.name, t.type, t.dims, pattern(n.value(), seed++));
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.error().message.c_str());
      return 1;
    }
  }
  return 0;
}

std::string hex(const uint8_t* p, uint64_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  for (uint64_t k = 0; k < n; ++k) {
    s += kDigits[p[k] >> 4];
    s += kDigits[p[k] & 15];
  }
  return s;
}

int dump(const std::string& path) {
  auto m = minfer::gguf::Model::open(path);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.error().message.c_str());
    return 1;
  }
  const auto& f = m->primary();
  nlohmann::json j;
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["n_files"] = m->files().size();
  auto kvs = nlohmann::json::array();
  for (const auto& kv : f.metadata()) {
    nlohmann::json e;
    e["key"] = kv.key;
    e["type"] = static_cast<uint32_t>(kv.value.type);
    if (kv.value.type == ValueType::kArray)
      e["array_type"] = static_cast<uint32_t>(kv.value.array.type());
    e["value"] = minfer::gguf::value_to_json<nlohmann::json>(kv.value);
    e["display"] = kv.value.to_display();
    kvs.push_back(e);
  }
  j["metadata"] = kvs;
  auto ts = nlohmann::json::array();
  for (const auto& t : m->tensors()) {
    nlohmann::json e;
    e["name"] = t.name;
    e["type"] = static_cast<uint32_t>(t.type);
    e["dims"] = t.dims;
    e["offset"] = t.offset;
    e["n_elements"] = t.n_elements;
    e["n_bytes"] = t.n_bytes;
    e["split_index"] = t.split_index;
    e["data_hex"] = hex(t.data, t.n_bytes);
    ts.push_back(e);
  }
  j["tensors"] = ts;
  std::puts(j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "write") == 0) {
    Writer w;
    if (fill_sample(w) != 0) return 1;
    auto st = w.write(argv[2]);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.error().message.c_str());
      return 1;
    }
    return 0;
  }
  if (argc == 4 && std::strcmp(argv[1], "write-split") == 0) {
    Writer w;
    if (fill_sample(w) != 0) return 1;
    auto st = w.write_split(argv[2], static_cast<uint32_t>(std::stoul(argv[3])));
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.error().message.c_str());
      return 1;
    }
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "dump") == 0) return dump(argv[2]);
  std::fprintf(stderr,
               "usage: gguf_fixture write OUT.gguf | write-split PREFIX N | dump IN.gguf\n");
  return 2;
}
