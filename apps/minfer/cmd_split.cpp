// Stage 18 (CLI): `minfer split IN.gguf OUT_PREFIX` and `minfer merge FIRST_PART OUT.gguf`
// in llama-gguf-split's naming and layout: parts `OUT_PREFIX-00001-of-0000N.gguf`; the
// first part carries every metadata key of the input, each part split.no (u16, 0-based),
// split.tensors.count (i32, the total) and split.count (u16), in that order after the
// input's keys; tensors in input order, a new part when the next tensor would pass
// --split-max-size (bytes of padded tensor data, decimal M/G as llama-gguf-split counts
// them) or every --split-max-tensors tensors (128 by default). The parts are
// byte-identical to llama-gguf-split's.
// merge writes the parts' tensors in part order behind the first part's metadata with
// the split keys removed, so split then merge gives back the input file byte for byte
// (llama-gguf-split's merge keeps split.no and split.tensors.count and sets
// split.count to 0; its tensor data is the same).
// Invariants: every file is written to NAME.tmp and renamed when complete; a failed run
// removes what it wrote, so no half part or half model is left behind.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "files.h"
#include "gguf/gguf.h"

namespace minfer::cli {
namespace {

constexpr uint64_t kAlign = gguf::kDefaultAlignment;  // llama-gguf-split pads to 32

bool is_split_key(std::string_view k) {
  return k == gguf::kKeySplitNo || k == gguf::kKeySplitCount || k == gguf::kKeySplitTensorsCount;
}

// "300M" / "2G": llama-gguf-split's decimal units.
Result<uint64_t> parse_size(const std::string& s) {
  if (s.size() < 2 || (s.back() != 'M' && s.back() != 'G')) {
    return make_error("--split-max-size: '" + s + "' is not N followed by M or G (e.g. 500M, 2G)");
  }
  MINFER_TRY(const int64_t n, parse_int(std::string_view(s).substr(0, s.size() - 1),
                                        "--split-max-size", 1, INT32_MAX));
  const uint64_t unit = s.back() == 'M' ? 1000ull * 1000 : 1000ull * 1000 * 1000;
  return static_cast<uint64_t>(n) * unit;
}

std::vector<uint64_t> ggml_dims(const std::vector<uint64_t>& dims) {
  size_t n = dims.size();
  while (n > 1 && dims[n - 1] == 1) --n;
  return {dims.begin(), dims.begin() + static_cast<long>(n)};
}

Status write_file(const std::string& path, const std::vector<gguf::KeyValue>& kvs,
                  const std::vector<const gguf::TensorInfo*>& tensors) {
  std::vector<gguf::StreamWriter::TensorDecl> decls;
  for (const auto* t : tensors) decls.push_back({t->name, t->type, ggml_dims(t->dims)});
  MINFER_TRY(auto w, gguf::StreamWriter::create(path, kvs, decls));
  for (const auto* t : tensors) MINFER_TRY_STATUS(w->write({t->data, t->n_bytes}));
  return w->finish();
}

}  // namespace

int run_split(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer split IN.gguf OUT_PREFIX [--split-max-size N(M|G) | --split-max-tensors N]\n"
      "llama-gguf-split's parts OUT_PREFIX-00001-of-0000N.gguf (the same bytes)");
  std::string max_size;
  int32_t max_tensors = 0;
  p.string_opt("--split-max-size", "N(M|G)",
               "start a new part before the tensor data would pass N megabytes (10^6) or\n"
               "gigabytes (10^9)",
               max_size);
  p.int_opt("--split-max-tensors", "N", "at most N tensors per part (128 when no limit is given)",
            max_tensors, 1, INT32_MAX);
  bool force = false;
  p.flag("--force", "replace existing parts (never the input)", [&] { force = true; });
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  if (parsed.positionals.size() != 2) {
    return fail(fmt::format("split: expected IN.gguf OUT_PREFIX, got {} argument(s)",
                            parsed.positionals.size()));
  }
  if (!max_size.empty() && max_tensors > 0) {
    return fail("split: give --split-max-size or --split-max-tensors, not both");
  }
  uint64_t size_limit = 0;
  if (!max_size.empty()) {
    auto n = parse_size(max_size);
    if (!n) return fail(n.error().message);
    size_limit = *n;
  } else if (max_tensors == 0) {
    max_tensors = 128;
  }
  const std::string& in_path = parsed.positionals[0];
  std::string prefix = parsed.positionals[1];
  if (prefix.ends_with(".gguf")) prefix.resize(prefix.size() - 5);
  if (auto st = check_model_file(in_path); !st.ok()) return fail(st.error().message);
  auto file = gguf::File::open(in_path);
  if (!file) return fail(file.error().message);
  const gguf::File& f = **file;
  if (f.alignment() != kAlign) {
    return fail(
        fmt::format("split: {} aligns its data to {} bytes; llama-gguf-split's layout "
                    "needs the default {}",
                    in_path, f.alignment(), kAlign));
  }
  const auto& tensors = f.tensors();
  if (tensors.empty()) return fail("split: " + in_path + " has no tensors");

  // Parts as llama-gguf-split cuts them.
  std::vector<std::vector<const gguf::TensorInfo*>> parts(1);
  uint64_t current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t padded = (tensors[i].n_bytes + kAlign - 1) / kAlign * kAlign;
    const bool cut = size_limit > 0 ? current + padded > size_limit
                                    : i > 0 && i % static_cast<size_t>(max_tensors) == 0;
    if (cut) {
      if (parts.back().empty()) {
        return fail(fmt::format("split: {} ({} bytes) alone passes --split-max-size {}",
                                tensors[i].name, tensors[i].n_bytes, max_size));
      }
      parts.emplace_back();
      current = padded;
    } else {
      current += padded;
    }
    parts.back().push_back(&tensors[i]);
  }
  if (parts.size() > UINT16_MAX) return fail("split: more than 65535 parts");
  const auto n_parts = static_cast<uint32_t>(parts.size());
  // Every part's path is checked before the first is written: an existing part or the
  // input itself stops the command with nothing written.
  for (uint32_t i = 0; i < n_parts; ++i) {
    if (auto st =
            check_new_output(gguf::split_path(prefix, i, n_parts), {in_path}, force, "OUT_PREFIX");
        !st.ok()) {
      return fail("split: " + st.error().message);
    }
  }
  std::vector<std::string> written;
  for (uint32_t i = 0; i < n_parts; ++i) {
    std::vector<gguf::KeyValue> kvs;
    if (i == 0) {
      for (const auto& kv : f.metadata()) {
        if (!is_split_key(kv.key)) kvs.push_back(kv);
      }
    }
    kvs.push_back({std::string(gguf::kKeySplitNo), gguf::Value::u16(static_cast<uint16_t>(i))});
    kvs.push_back({std::string(gguf::kKeySplitTensorsCount),
                   gguf::Value::i32(static_cast<int32_t>(tensors.size()))});
    kvs.push_back(
        {std::string(gguf::kKeySplitCount), gguf::Value::u16(static_cast<uint16_t>(n_parts))});
    const std::string path = gguf::split_path(prefix, i, n_parts);
    if (auto st = write_file(path, kvs, parts[i]); !st.ok()) {
      for (const auto& w : written) std::remove(w.c_str());
      return fail("split: " + st.error().message);
    }
    written.push_back(path);
    fmt::print("{}: {} tensors\n", path, parts[i].size());
  }
  fmt::print("split: {} parts, {} tensors\n", n_parts, tensors.size());
  return 0;
}

int run_merge(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer merge FIRST_PART OUT.gguf\n"
      "one GGUF from the parts of a split model (split then merge gives back the input)");
  bool force = false;
  p.flag("--force", "replace an existing OUT.gguf (never one of the parts)", [&] { force = true; });
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  if (parsed.positionals.size() != 2) {
    return fail(fmt::format("merge: expected FIRST_PART OUT.gguf, got {} argument(s)",
                            parsed.positionals.size()));
  }
  const std::string& in_path = parsed.positionals[0];
  const std::string& out_path = parsed.positionals[1];
  if (auto st = check_model_file(in_path); !st.ok()) return fail(st.error().message);
  auto model = gguf::Model::open(in_path);
  if (!model) return fail(model.error().message);
  std::vector<std::string> inputs;
  for (const auto& f : model->files()) inputs.push_back(f->name());
  if (auto st = check_new_output(out_path, inputs, force, "OUT.gguf"); !st.ok()) {
    return fail("merge: " + st.error().message);
  }
  if (model->find(gguf::kKeySplitCount) == nullptr) {
    return fail("merge: " + in_path + " is not part of a split model (no split.count)");
  }
  if (model->primary().alignment() != kAlign) {
    return fail(fmt::format("merge: {} aligns its data to {} bytes, expected {}", in_path,
                            model->primary().alignment(), kAlign));
  }
  std::vector<gguf::KeyValue> kvs;
  for (const auto& kv : model->metadata()) {
    if (!is_split_key(kv.key)) kvs.push_back(kv);
  }
  std::vector<const gguf::TensorInfo*> tensors;
  for (const auto& t : model->tensors()) tensors.push_back(&t);
  if (auto st = write_file(out_path, kvs, tensors); !st.ok()) {
    return fail("merge: " + st.error().message);
  }
  fmt::print("merge: {} parts, {} tensors -> {}\n", model->files().size(), tensors.size(),
             out_path);
  return 0;
}

}  // namespace minfer::cli
