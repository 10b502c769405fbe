// Stage 16 (sessions): reading and writing --session files (layout in session_file.h).
#include "chat/session_file.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string_view>

namespace minfer::chat {
namespace {

constexpr char kMagic[8] = {'M', 'I', 'N', 'F', 'S', 'E', 'S', 'S'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8;
constexpr uint64_t kWeightSample = 256;  // bytes of each tensor in the model hash

// XXH3-64 (libxxhash, streaming): fast and enough to catch truncation and bit rot; not
// a defence against tampering.
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) {
    MINFER_CHECK(state_ != nullptr, "session: out of memory for the hash state");
    XXH3_64bits_reset(state_.get());
  }
  void bytes(const void* p, size_t n) { XXH3_64bits_update(state_.get(), p, n); }
  template <typename T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  void str(std::string_view s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  uint64_t digest() const { return XXH3_64bits_digest(state_.get()); }

 private:
  struct Free {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, Free> state_;
};

void hash_value(Hasher& f, const gguf::Value& v) {
  f.pod(static_cast<uint32_t>(v.type));
  switch (v.type) {
    case gguf::ValueType::kString:
      f.str(v.str);
      break;
    case gguf::ValueType::kArray:
      f.pod(static_cast<uint32_t>(v.array.type()));
      f.pod<uint64_t>(v.array.size());
      for (const gguf::Value& e : v.array) hash_value(f, e);  // one element Value at a time
      break;
    case gguf::ValueType::kFloat32:
    case gguf::ValueType::kFloat64:
      f.pod(v.f);
      break;
    default:
      f.pod(v.u);
      f.pod(v.i);
      break;
  }
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(const std::string& in, size_t& off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof v);
  off += sizeof v;
  return v;
}

}  // namespace

uint64_t model_hash(const gguf::Model& model) {
  Hasher f;
  for (const gguf::KeyValue& kv : model.metadata()) {
    f.str(kv.key);
    hash_value(f, kv.value);
  }
  for (const gguf::TensorInfo& t : model.tensors()) {
    f.str(t.name);
    f.pod(static_cast<uint32_t>(t.type));
    f.pod<uint64_t>(t.dims.size());
    for (uint64_t d : t.dims) f.pod(d);
    f.pod(t.offset);
    f.pod(t.split_index);
    // The first bytes of every tensor: same-shaped models with other weights (another
    // fine-tune, another quantization run) differ here, at the cost of one page each.
    if (t.data != nullptr) f.bytes(t.data, std::min<uint64_t>(t.n_bytes, kWeightSample));
  }
  return f.digest();
}

Status write_session(const std::string& path, const SessionData& data) {
  if (data.kv.size() != data.n_kv_tokens * data.kv_token_bytes) {
    return make_error(fmt::format("session: {} KV bytes for {} tokens of {} bytes", data.kv.size(),
                                  data.n_kv_tokens, data.kv_token_bytes));
  }
  const std::string state = data.state.dump();
  std::string head;
  head.append(kMagic, sizeof kMagic);
  put<uint32_t>(head, kSessionVersion);
  uint32_t kv_types = 0;
  if (data.kv_format) {
    kv_types = (static_cast<uint32_t>(data.kv_format->k) + 1) |
               ((static_cast<uint32_t>(data.kv_format->v) + 1) << 8) |
               (data.kv_rotated ? 1u << 16 : 0u);
  }
  put<uint32_t>(head, kv_types);
  put<uint64_t>(head, data.model_hash);
  put<uint64_t>(head, state.size());
  put<uint64_t>(head, data.n_kv_tokens);
  put<uint64_t>(head, data.kv_token_bytes);
  Hasher sum;
  sum.bytes(head.data(), head.size());
  sum.bytes(state.data(), state.size());
  sum.bytes(data.kv.data(), data.kv.size());

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return make_error(fmt::format("session: cannot open '{}' for writing", tmp));
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    f.write(state.data(), static_cast<std::streamsize>(state.size()));
    f.write(reinterpret_cast<const char*>(data.kv.data()),
            static_cast<std::streamsize>(data.kv.size()));
    const uint64_t checksum = sum.digest();
    f.write(reinterpret_cast<const char*>(&checksum), sizeof checksum);
    f.close();
    if (!f) return make_error(fmt::format("session: error writing '{}'", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return make_error(
        fmt::format("session: cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
  return Ok{};
}

Result<SessionData> read_session(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(fmt::format("session: cannot open '{}'", path));
  const std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (in.size() < kHeaderBytes + 8 || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0) {
    return make_error(fmt::format("session: '{}' is not a minfer session file", path));
  }
  size_t off = sizeof kMagic;
  const auto version = get<uint32_t>(in, off);
  if (version != kSessionVersion) {
    return make_error(fmt::format("session: '{}' has version {}, this build reads {}", path,
                                  version, kSessionVersion));
  }
  const auto kv_types = get<uint32_t>(in, off);
  SessionData d;
  if (kv_types != 0) {
    const uint32_t k = kv_types & 0xff, v = (kv_types >> 8) & 0xff;
    constexpr uint32_t kFormats = static_cast<uint32_t>(graph::KvFormat::kQ4_0) + 1;
    if (k == 0 || k > kFormats || v == 0 || v > kFormats || (kv_types >> 17) != 0) {
      return make_error(fmt::format(
          "session: '{}' names KV cache types {:#x} this build does not know", path, kv_types));
    }
    d.kv_format =
        graph::KvFormats(static_cast<graph::KvFormat>(k - 1), static_cast<graph::KvFormat>(v - 1));
    d.kv_rotated = ((kv_types >> 16) & 1) != 0;
  }
  d.model_hash = get<uint64_t>(in, off);
  const auto state_len = get<uint64_t>(in, off);
  d.n_kv_tokens = get<uint64_t>(in, off);
  d.kv_token_bytes = get<uint64_t>(in, off);
  // Overflow-safe size check: every field must fit the bytes that are there.
  const uint64_t body = in.size() - kHeaderBytes - 8;
  if (state_len > body || (d.kv_token_bytes != 0 && d.n_kv_tokens > body / d.kv_token_bytes) ||
      state_len + d.n_kv_tokens * d.kv_token_bytes != body) {
    return make_error(
        fmt::format("session: '{}' is truncated or corrupt (sizes do not add up)", path));
  }
  Hasher sum;
  sum.bytes(in.data(), in.size() - 8);
  uint64_t stored = 0;
  std::memcpy(&stored, in.data() + in.size() - 8, 8);
  if (stored != sum.digest()) {
    return make_error(fmt::format("session: '{}' fails its checksum (corrupt file)", path));
  }
  try {
    d.state =
        nlohmann::ordered_json::parse(in.begin() + static_cast<std::ptrdiff_t>(off),
                                      in.begin() + static_cast<std::ptrdiff_t>(off + state_len));
  } catch (const nlohmann::json::exception& e) {
    return make_error(fmt::format("session: '{}': bad state JSON: {}", path, e.what()));
  }
  off += state_len;
  d.kv.resize(d.n_kv_tokens * d.kv_token_bytes);
  if (!d.kv.empty()) std::memcpy(d.kv.data(), in.data() + off, d.kv.size());  // none after /clear
  return d;
}

Status check_kv_format(const std::string& what, const SessionData& data, graph::KvFormats format,
                       bool rotated) {
  if (!data.kv_format || data.n_kv_tokens == 0) return Ok{};
  if (*data.kv_format == format) {
    if (data.kv_rotated == rotated) return Ok{};
    return make_error(fmt::format(
        "{} holds {} KV rows {} by llama.cpp's Walsh-Hadamard rotation, this run's are {}: "
        "run with the same MINFER_KV_ROTATION (unset or 0)",
        what, graph::kv_formats_name(format), data.kv_rotated ? "rotated" : "not rotated",
        rotated ? "rotated" : "not"));
  }
  return make_error(fmt::format(
      "{} holds a {} KV cache (K {}, V {}), this run's is {} (K {}, V {}): pass the same "
      "-ctk / -ctv",
      what, graph::kv_formats_name(*data.kv_format), graph::kv_format_name(data.kv_format->k),
      graph::kv_format_name(data.kv_format->v), graph::kv_formats_name(format),
      graph::kv_format_name(format.k), graph::kv_format_name(format.v)));
}

}  // namespace minfer::chat
