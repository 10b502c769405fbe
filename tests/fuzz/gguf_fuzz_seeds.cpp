// Fuzz seeds (stage 2): writes a few small valid GGUF files into the directory given.
// Invariant: every seed parses (checked here), so the fuzzer starts from valid inputs.
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"

using minfer::DType;
using minfer::gguf::Value;
using minfer::gguf::ValueType;
using minfer::gguf::Writer;

static int save(const Writer& w, const std::string& path) {
  auto st = w.write(path);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  auto f = minfer::gguf::File::open(path);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.error().message.c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  int rc = 0;
  {
    Writer w;  // metadata only, every scalar type
    w.set("general.architecture", Value::string("llama"));
    w.set("a", Value::u8(1));
    w.set("b", Value::i8(-1));
    w.set("c", Value::u16(2));
    w.set("d", Value::i16(-2));
    w.set("e", Value::u32(3));
    w.set("f", Value::i32(-3));
    w.set("g", Value::u64(4));
    w.set("h", Value::i64(-4));
    w.set("i", Value::f32(0.5f));
    w.set("j", Value::f64(0.25));
    w.set("k", Value::boolean(true));
    rc |= save(w, dir + "/scalars.gguf");
  }
  {
    Writer w;  // arrays, nested arrays, strings
    w.set("tokens", Value::string_array({"a", "bc", "", "\xe2\x96\x81x"}));
    w.set("scores", Value::f32_array({0.0f, -1.0f}));
    w.set("types", Value::i32_array({1, 2, 3}));
    w.set("nested", Value::arr(ValueType::kArray, {Value::i32_array({1}), Value::i32_array({})}));
    rc |= save(w, dir + "/arrays.gguf");
  }
  {
    Writer w;  // tensors of several types, default alignment
    w.set("general.architecture", Value::string("qwen2"));
    std::vector<uint8_t> f32(4 * 4, 1), q8(34, 2), q4k(144, 3), f16(6, 4);
    rc |= !w.add_tensor("w.f32", DType::kF32, {4}, f32).ok();
    rc |= !w.add_tensor("w.q8_0", DType::kQ8_0, {32}, q8).ok();
    rc |= !w.add_tensor("w.q4_k", DType::kQ4_K, {256}, q4k).ok();
    rc |= !w.add_tensor("w.f16", DType::kF16, {3, 1}, f16).ok();
    rc |= save(w, dir + "/tensors.gguf");
  }
  {
    Writer w;  // small alignment, split keys
    w.set_alignment(8);
    w.set("split.no", Value::u16(0));
    w.set("split.count", Value::u16(1));
    w.set("split.tensors.count", Value::i32(1));
    std::vector<uint8_t> d(2 * 2 * 3, 5);
    rc |= !w.add_tensor("t", DType::kBF16, {2, 3, 1, 1}, d).ok();
    rc |= save(w, dir + "/aligned8.gguf");
  }
  return rc;
}
