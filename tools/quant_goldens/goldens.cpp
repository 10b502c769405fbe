// Tools (quant goldens): writes tests/data/quant/ with llama.cpp's own answers — for
// each type, ggml's reference-quantized bytes and ggml's dequantized floats of fixed
// inputs, and ggml's dequantization checksum for every tensor of SmolLM2-135M Q4_1.
// Invariant: built and linked only against ggml's sources (by regenerate.sh, outside
// the main build), so every golden byte is ggml's, never ours.
//
// Usage: quant_goldens OUT_DIR MODEL.gguf
//
// Files (all little-endian; tests/quant/goldens.h reads them):
//   inputs.bin   "MQIN" u32 version, u32 n_cases, then per case:
//                u16 name_len, name, u64 n, f32[n]
//   <type>.bin   "MQGD" u32 version, u32 ggml type id, u32 n_cases, then per case (same
//                order as inputs.bin): u16 name_len, name, u64 n, u64 n_bytes,
//                u8[n_bytes] quantized by ggml's from_float_ref (quantize_row_*_ref)
//                into a zeroed buffer, f32[n] = ggml's to_float of those bytes
//   dequant_random.bin  "MQDR" u32 version, u32 n_types, then per type: u32 ggml type
//                id, u64 n, u64 n_bytes, u8[n_bytes] uniformly random (any scale bits,
//                NaN/Inf included), f32[n] = ggml's to_float of them
//   smollm2_dequant.txt  one line per tensor: name, ggml type id, n_elements, absolute
//                byte offset in the file, n_bytes, FNV-1a 64 (hex) of ggml's dequantized
//                floats taken as 32-bit words (h ^= bits; h *= 0x100000001b3)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"

// Q8_K is no file type, so ggml's type table carries no conversions for it; its
// reference functions are declared in the internal ggml-quants.h (block pointers there;
// the same C ABI as void*).
extern "C" void quantize_row_q8_K_ref(const float* x, void* y, int64_t k);
extern "C" void dequantize_row_q8_K(const void* x, float* y, int64_t k);

namespace {

constexpr uint32_t kVersion = 1;

struct Case {
  std::string name;
  std::vector<float> x;
};

// splitmix64: a fixed, documented generator so inputs never depend on the libc.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double gaussian() {
    const double u1 = uniform() + 0x1.0p-54;
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

std::vector<Case> synthetic_cases() {
  std::vector<Case> cases;
  Rng rng{0x6d696e666572ull};  // "minfer"
  auto add = [&](const char* name, size_t n, auto&& gen) {
    Case c{name, std::vector<float>(n)};
    for (size_t i = 0; i < n; ++i) c.x[i] = static_cast<float>(gen(i));
    cases.push_back(std::move(c));
  };
  add("gaussian", 1024, [&](size_t) { return rng.gaussian(); });
  add("uniform", 1024, [&](size_t) { return rng.uniform(-1.0, 1.0); });
  add("positive", 512, [&](size_t) { return rng.uniform(0.5, 2.0); });
  add("negative", 512, [&](size_t) { return rng.uniform(-3.0, -0.1); });
  add("outliers", 1024, [&](size_t) {
    const double v = 0.02 * rng.gaussian();
    if (rng.uniform() >= 0.01) return v;
    const double outlier = rng.uniform(1.0, 4.0);  // 50-200 standard deviations
    return rng.uniform() < 0.5 ? -outlier : outlier;
  });
  // Zero 32-blocks interleaved with data, then a whole zero 256-block.
  add("zero_blocks", 1024, [&](size_t i) {
    if (i >= 512 && i < 768) return 0.0;
    return (i / 32) % 2 == 0 ? 0.0 : rng.gaussian();
  });
  // Tiny magnitudes: 1e-6 scale, a 16-block below ggml's 1e-15 "all zero" threshold,
  // fp32 subnormals, and values under fp16's smallest subnormal.
  add("tiny", 512, [&](size_t i) {
    const double g = rng.gaussian();
    if (i < 256) return 1e-6 * g;
    if (i < 288) return 1e-20 * g;
    if (i < 320) return 1e-40 * g;
    if (i < 384) return 1e-8 * g;
    return 1e-4 * g;
  });
  add("mixed_signs", 512, [&](size_t i) {
    const double m = rng.uniform(0.0, 1.0);
    if (i % 97 == 3) return 7.5;
    return (i % 2 == 0 ? m : -m);
  });
  add("large", 512, [&](size_t) { return 3.0e4 * rng.gaussian(); });
  // Constant blocks (max == min): positive, negative, zero-crossing-free.
  add("constant", 512, [&](size_t i) {
    const size_t blk = i / 32;
    return blk % 4 == 0 ? 0.75 : blk % 4 == 1 ? -1.25 : blk % 4 == 2 ? 3.0 : 1e-3;
  });
  // Exact grid values: quarter steps and halves, where rounding ties happen.
  add("grid", 512, [&](size_t i) {
    return 0.25 * static_cast<double>(static_cast<int>(i % 33) - 16) + (i % 7 == 0 ? 0.125 : 0.0);
  });
  // A long row of 16 super-blocks, each with its own scale 10^U(-3, 1).
  {
    Case c{"long_row", std::vector<float>(4096)};
    for (size_t b = 0; b < 16; ++b) {
      const double scale = std::pow(10.0, rng.uniform(-3.0, 1.0));
      for (size_t i = 0; i < 256; ++i)
        c.x[256 * b + i] = static_cast<float>(scale * rng.gaussian());
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

uint64_t fnv1a_words(const float* x, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, &x[i], 4);
    h ^= w;
    h *= 0x100000001b3ull;
  }
  return h;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "quant_goldens: %s\n", msg.c_str());
  std::exit(1);
}

struct Writer {
  FILE* f;
  explicit Writer(const std::string& path) : f(std::fopen(path.c_str(), "wb")) {
    if (!f) die("cannot write " + path);
  }
  ~Writer() { std::fclose(f); }
  void bytes(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) die("short write");
  }
  template <typename T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  void name(const std::string& s) {
    pod<uint16_t>(static_cast<uint16_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

// Read and dequantize a model tensor with ggml.
struct ModelTensor {
  std::string name;
  ggml_type type;
  int64_t n;
  uint64_t offset;  // absolute
  std::vector<uint8_t> raw;
  std::vector<float> values;
};

std::vector<ModelTensor> read_model(const std::string& path, uint64_t* file_size) {
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context* ctx = gguf_init_from_file(path.c_str(), params);
  if (!ctx) die("gguf_init_from_file failed: " + path);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) die("cannot open " + path);
  std::fseek(f, 0, SEEK_END);
  *file_size = static_cast<uint64_t>(std::ftell(f));
  std::vector<ModelTensor> out;
  for (int64_t t = 0; t < gguf_get_n_tensors(ctx); ++t) {
    ModelTensor m;
    m.name = gguf_get_tensor_name(ctx, t);
    m.type = gguf_get_tensor_type(ctx, t);
    const size_t size = gguf_get_tensor_size(ctx, t);
    m.n = static_cast<int64_t>(size / ggml_type_size(m.type)) * ggml_blck_size(m.type);
    m.offset = gguf_get_data_offset(ctx) + gguf_get_tensor_offset(ctx, t);
    m.raw.resize(size);
    std::fseek(f, static_cast<long>(m.offset), SEEK_SET);
    if (std::fread(m.raw.data(), 1, size, f) != size) die("short read: " + m.name);
    m.values.resize(static_cast<size_t>(m.n));
    if (m.type == GGML_TYPE_F32) {
      std::memcpy(m.values.data(), m.raw.data(), size);
    } else {
      const auto* tt = ggml_get_type_traits(m.type);
      if (!tt->to_float) die("no to_float for " + m.name);
      tt->to_float(m.raw.data(), m.values.data(), m.n);
    }
    out.push_back(std::move(m));
  }
  std::fclose(f);
  gguf_free(ctx);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) die("usage: quant_goldens OUT_DIR MODEL.gguf");
  const std::string out = argv[1];
  const std::string model_path = argv[2];

  uint64_t file_size = 0;
  const std::vector<ModelTensor> model = read_model(model_path, &file_size);

  // Model checksums.
  {
    FILE* f = std::fopen((out + "/smollm2_dequant.txt").c_str(), "w");
    if (!f) die("cannot write smollm2_dequant.txt");
    const char* base = std::strrchr(model_path.c_str(), '/');
    std::fprintf(f,
                 "# ggml dequantization of %s (%llu bytes): name type n offset n_bytes fnv1a64\n",
                 base ? base + 1 : model_path.c_str(), static_cast<unsigned long long>(file_size));
    for (const auto& m : model) {
      std::fprintf(f, "%s %d %lld %llu %zu %016llx\n", m.name.c_str(), static_cast<int>(m.type),
                   static_cast<long long>(m.n), static_cast<unsigned long long>(m.offset),
                   m.raw.size(),
                   static_cast<unsigned long long>(fnv1a_words(m.values.data(), m.values.size())));
    }
    std::fclose(f);
  }

  // Inputs: synthetic distributions, then slices of real weights (ggml-dequantized).
  std::vector<Case> cases = synthetic_cases();
  struct Slice {
    const char* tensor;
    size_t start;
    size_t n;
  };
  const Slice slices[] = {
      {"token_embd.weight", 576 * 1000, 1024}, {"blk.0.attn_q.weight", 0, 1024},
      {"blk.0.attn_k.weight", 576 * 7, 1024},  {"blk.12.ffn_down.weight", 1536 * 3, 1024},
      {"blk.29.ffn_gate.weight", 0, 1024},     {"blk.0.attn_norm.weight", 0, 512},
      {"output_norm.weight", 64, 512},
  };
  for (const Slice& s : slices) {
    const ModelTensor* m = nullptr;
    for (const auto& t : model) {
      if (t.name == s.tensor) m = &t;
    }
    if (!m) die(std::string("model lacks ") + s.tensor);
    if (s.start + s.n > m->values.size()) die(std::string("slice out of range: ") + s.tensor);
    cases.push_back(Case{std::string("real:") + s.tensor,
                         std::vector<float>(m->values.begin() + static_cast<long>(s.start),
                                            m->values.begin() + static_cast<long>(s.start + s.n))});
  }

  {
    Writer w(out + "/inputs.bin");
    w.bytes("MQIN", 4);
    w.pod<uint32_t>(kVersion);
    w.pod<uint32_t>(static_cast<uint32_t>(cases.size()));
    for (const auto& c : cases) {
      w.name(c.name);
      w.pod<uint64_t>(c.x.size());
      w.bytes(c.x.data(), c.x.size() * 4);
    }
  }

  const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,
                             GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                             GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                             GGML_TYPE_Q6_K, GGML_TYPE_Q8_K};
  int chunk_mismatches = 0;
  for (ggml_type type : types) {
    const auto* tt = ggml_get_type_traits(type);
    // F32 has no conversion in ggml (its rows are stored as is).
    if (type != GGML_TYPE_F32 && type != GGML_TYPE_Q8_K && !tt->from_float_ref) {
      die(std::string("no from_float_ref for ") + tt->type_name);
    }
    Writer w(out + "/" + tt->type_name + ".bin");
    w.bytes("MQGD", 4);
    w.pod<uint32_t>(kVersion);
    w.pod<uint32_t>(static_cast<uint32_t>(type));
    w.pod<uint32_t>(static_cast<uint32_t>(cases.size()));
    for (const auto& c : cases) {
      const int64_t n = static_cast<int64_t>(c.x.size());
      const size_t n_bytes = ggml_row_size(type, n);
      std::vector<uint8_t> q(n_bytes, 0);
      if (type == GGML_TYPE_F32) {
        std::memcpy(q.data(), c.x.data(), n_bytes);
      } else if (type == GGML_TYPE_Q8_K) {
        quantize_row_q8_K_ref(c.x.data(), q.data(), n);
      } else {
        tt->from_float_ref(c.x.data(), q.data(), n);
      }
      std::vector<float> deq(c.x.size());
      if (type == GGML_TYPE_F32) {
        std::memcpy(deq.data(), q.data(), n_bytes);
      } else if (type == GGML_TYPE_Q8_K) {
        dequantize_row_q8_K(q.data(), deq.data(), n);
      } else {
        tt->to_float(q.data(), deq.data(), n);
      }
      // Cross-check: what llama-quantize writes without an importance matrix
      // (ggml_quantize_chunk) is this same reference output. Q8_K is not a file type.
      if (type != GGML_TYPE_Q8_K && type != GGML_TYPE_F32) {
        std::vector<uint8_t> q2(n_bytes, 0);
        ggml_quantize_chunk(type, c.x.data(), q2.data(), 0, 1, n, nullptr);
        if (q2 != q) {
          std::fprintf(stderr, "note: %s %s: ggml_quantize_chunk differs from the reference\n",
                       tt->type_name, c.name.c_str());
          ++chunk_mismatches;
        }
      }
      w.name(c.name);
      w.pod<uint64_t>(static_cast<uint64_t>(n));
      w.pod<uint64_t>(n_bytes);
      w.bytes(q.data(), n_bytes);
      w.bytes(deq.data(), deq.size() * 4);
    }
  }
  // Dequantization of arbitrary bytes: every scale/sign/high-bit pattern, not only the
  // ones a quantizer emits.
  {
    Writer w(out + "/dequant_random.bin");
    w.bytes("MQDR", 4);
    w.pod<uint32_t>(kVersion);
    w.pod<uint32_t>(static_cast<uint32_t>(sizeof(types) / sizeof(types[0])));
    Rng rng{0x72616e646f6dull};  // "random"
    constexpr int64_t kRandomElements = 2048;
    for (ggml_type type : types) {
      const size_t n_bytes = ggml_row_size(type, kRandomElements);
      std::vector<uint8_t> q(n_bytes);
      for (auto& byte : q) byte = static_cast<uint8_t>(rng.next() >> 56);
      std::vector<float> deq(kRandomElements);
      if (type == GGML_TYPE_F32) {
        std::memcpy(deq.data(), q.data(), n_bytes);
      } else if (type == GGML_TYPE_Q8_K) {
        dequantize_row_q8_K(q.data(), deq.data(), kRandomElements);
      } else {
        ggml_get_type_traits(type)->to_float(q.data(), deq.data(), kRandomElements);
      }
      w.pod<uint32_t>(static_cast<uint32_t>(type));
      w.pod<uint64_t>(static_cast<uint64_t>(kRandomElements));
      w.pod<uint64_t>(n_bytes);
      w.bytes(q.data(), n_bytes);
      w.bytes(deq.data(), deq.size() * 4);
    }
  }

  std::printf("quant_goldens: %zu cases x %zu types, %zu model tensors, %d chunk mismatches\n",
              cases.size(), sizeof(types) / sizeof(types[0]), model.size(), chunk_mismatches);
  return 0;
}
