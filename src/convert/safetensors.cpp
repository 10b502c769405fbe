// Stage 3b (convert): safetensors reader. Every number taken from the header is checked
// before it is used: the header length against the file size, each data offset against
// the data section, each shape's element count and byte size against overflow and
// against the offsets.
#include "convert/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/checked_math.h"

namespace minfer::convert {
namespace {

using nlohmann::json;

// The header must be a sane size: safetensors itself refuses headers over 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct DTypeName {
  const char* name;
  StDType type;
  uint32_t size;
};

// The dtypes of the safetensors format (its Dtype enum).
constexpr DTypeName kDTypes[] = {
    {"F32", StDType::kF32, 4},    {"F16", StDType::kF16, 2},       {"BF16", StDType::kBF16, 2},
    {"F64", StDType::kOther, 8},  {"I64", StDType::kOther, 8},     {"U64", StDType::kOther, 8},
    {"I32", StDType::kOther, 4},  {"U32", StDType::kOther, 4},     {"I16", StDType::kOther, 2},
    {"U16", StDType::kOther, 2},  {"I8", StDType::kOther, 1},      {"U8", StDType::kOther, 1},
    {"BOOL", StDType::kOther, 1}, {"F8_E4M3", StDType::kOther, 1}, {"F8_E5M2", StDType::kOther, 1},
};

Result<StTensor> parse_entry(const std::string& name, const json& e,
                             std::span<const uint8_t> data_section) {
  const uint64_t data_size = data_section.size();
  auto bad = [&](const std::string& why) {
    return make_error(fmt::format("tensor '{}': {}", name, why));
  };
  if (!e.is_object()) return bad("header entry is not an object");
  if (!e.contains("dtype") || !e["dtype"].is_string()) return bad("no \"dtype\" string");
  if (!e.contains("shape") || !e["shape"].is_array()) return bad("no \"shape\" array");
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() ||
      e["data_offsets"].size() != 2) {
    return bad("\"data_offsets\" is not [begin, end]");
  }
  StTensor t;
  t.name = name;
  t.dtype_name = e["dtype"].get<std::string>();
  const auto* d = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                               [&](const DTypeName& x) { return t.dtype_name == x.name; });
  if (d == std::end(kDTypes)) return bad(fmt::format("unknown dtype \"{}\"", t.dtype_name));
  t.dtype = d->type;
  t.elem_size = d->size;

  uint64_t n = 1;
  for (const json& dim : e["shape"]) {
    if (!dim.is_number_unsigned()) return bad("shape has a dimension that is not an integer >= 0");
    const uint64_t v = dim.get<uint64_t>();
    if (!checked_mul(n, v, &n)) return bad("element count overflows");
    t.shape.push_back(v);
  }
  t.n_elements = n;
  uint64_t nbytes = 0;
  if (!checked_mul(n, t.elem_size, &nbytes)) return bad("byte size overflows");

  const json& off = e["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    return bad("data_offsets are not integers >= 0");
  }
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return bad(fmt::format("data_offsets [{}, {}) lie outside the data section ({} bytes)", begin,
                           end, data_size));
  }
  if (end - begin != nbytes) {
    return bad(fmt::format("shape [{}] of {} needs {} bytes but data_offsets span {}",
                           fmt::join(t.shape, ", "), t.dtype_name, nbytes, end - begin));
  }
  t.data = data_section.subspan(begin, nbytes);
  return t;
}

}  // namespace

Result<std::vector<StTensor>> parse_safetensors(std::span<const uint8_t> bytes) {
  const uint64_t size = bytes.size();
  if (size < 8)
    return make_error(fmt::format("truncated: {} bytes, no 8-byte header length", size));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[static_cast<size_t>(i)];
  if (header_len > size - 8) {
    return make_error(
        fmt::format("header length {} runs past the end of the file ({} bytes)", header_len, size));
  }
  if (header_len > kMaxHeaderBytes) {
    return make_error(
        fmt::format("header length {} exceeds {} bytes", header_len, kMaxHeaderBytes));
  }
  const char* hdr = reinterpret_cast<const char*>(bytes.data() + 8);
  json header;
  try {
    header = json::parse(hdr, hdr + header_len);
  } catch (const json::exception& e) {
    return make_error(fmt::format("header is not JSON: {}", e.what()));
  }
  if (!header.is_object()) return make_error("header is not a JSON object");

  const uint64_t data_start = 8 + header_len;
  const std::span<const uint8_t> data_section = bytes.subspan(data_start);
  std::vector<StTensor> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    MINFER_TRY(StTensor t, parse_entry(name, entry, data_section));
    tensors.push_back(std::move(t));
  }
  // nlohmann::json's object keeps keys sorted (std::map), which is the order we want
  // (byte order of the UTF-8 names, as Python sorts str); sort anyway so the order does
  // not rest on the JSON library's container.
  std::sort(tensors.begin(), tensors.end(),
            [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
  return tensors;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  MINFER_TRY(auto map, MappedFile::open(path));
  auto tensors = parse_safetensors(map->bytes());
  if (!tensors.ok()) return tensors.error().context(path);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->tensors_ = std::move(tensors).value();
  f->map_ = std::move(map);
  return f;
}

}  // namespace minfer::convert
