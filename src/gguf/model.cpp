// Stage 2 (file): a model as one GGUF file or all parts of a split model, plus the
// typed metadata getters.
// Invariants: tensors keep part order and carry their part's index; a split model
// opens only if every part agrees on split.no / split.count / split.tensors.count.
#include <fmt/format.h>

#include <limits>
#include <optional>

#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace minfer::gguf {

namespace {

// Integer value of `key` in `f` if present; error if present but not an integer in
// [0, max].
Result<std::optional<uint64_t>> split_key(const File& f, std::string_view key, uint64_t max) {
  const Value* v = f.find(key);
  if (v == nullptr) return std::optional<uint64_t>();
  bool fits = v->is_integer();
  uint64_t x = 0;
  if (fits) {
    const bool is_signed = v->type == ValueType::kInt8 || v->type == ValueType::kInt16 ||
                           v->type == ValueType::kInt32 || v->type == ValueType::kInt64;
    fits = is_signed ? v->i >= 0 : true;
    x = is_signed ? static_cast<uint64_t>(v->i) : v->u;
    fits = fits && x <= max;
  }
  if (!fits) {
    return make_error(fmt::format("{}: key '{}' must be an integer in 0..{}, got {} {}", f.name(),
                                  key, max, value_type_name(v->type), v->to_display()));
  }
  return std::optional<uint64_t>(x);
}

// "dir/name-00002-of-00003.gguf" → "dir/name" when the numbers match.
std::optional<std::string> split_prefix(const std::string& path, uint64_t split_no,
                                        uint64_t split_count) {
  const std::string suffix =
      split_path("", static_cast<uint32_t>(split_no), static_cast<uint32_t>(split_count));
  if (path.size() <= suffix.size() ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  return path.substr(0, path.size() - suffix.size());
}

}  // namespace

Result<Model> Model::open(const std::string& path) {
  MINFER_TRY(std::unique_ptr<File> first, File::open(path));
  MINFER_TRY(std::optional<uint64_t> count, split_key(*first, kKeySplitCount, UINT16_MAX));
  MINFER_TRY(std::optional<uint64_t> no, split_key(*first, kKeySplitNo, UINT16_MAX));
  const uint64_t n_parts = count.value_or(1) == 0 ? 1 : count.value_or(1);

  Model m;
  if (n_parts == 1) {
    if (no.value_or(0) != 0) {
      return make_error(fmt::format("{}: key '{}' is {} but '{}' says the model has 1 part", path,
                                    kKeySplitNo, *no, kKeySplitCount));
    }
    m.files_.push_back(std::move(first));
  } else {
    if (!no) {
      return make_error(fmt::format("{}: '{}' is {} but key '{}' is missing", path, kKeySplitCount,
                                    n_parts, kKeySplitNo));
    }
    if (*no >= n_parts) {
      return make_error(fmt::format("{}: key '{}' is {}, outside 0..{} ('{}' is {})", path,
                                    kKeySplitNo, *no, n_parts - 1, kKeySplitCount, n_parts));
    }
    auto prefix = split_prefix(path, *no, n_parts);
    if (!prefix) {
      return make_error(
          fmt::format("{}: part {} of a {}-part split model, but the file name "
                      "does not end in '{}'",
                      path, *no, n_parts,
                      split_path("", static_cast<uint32_t>(*no), static_cast<uint32_t>(n_parts))));
    }
    m.files_.resize(n_parts);
    m.files_[*no] = std::move(first);  // opening any part opens the whole model
    for (uint64_t k = 0; k < n_parts; ++k) {
      const std::string part_path =
          split_path(*prefix, static_cast<uint32_t>(k), static_cast<uint32_t>(n_parts));
      if (!m.files_[k]) {
        auto f = File::open(part_path);
        if (!f.ok()) {
          return f.error().context(fmt::format("split model part {} of {}", k + 1, n_parts));
        }
        m.files_[k] = std::move(f).value();
      }
      const File& f = *m.files_[k];
      MINFER_TRY(std::optional<uint64_t> pno, split_key(f, kKeySplitNo, UINT16_MAX));
      MINFER_TRY(std::optional<uint64_t> pcount, split_key(f, kKeySplitCount, UINT16_MAX));
      if (!pno || *pno != k) {
        return make_error(
            fmt::format("{}: key '{}' is {}, expected {} (its index in the file "
                        "names)",
                        part_path, kKeySplitNo, pno ? std::to_string(*pno) : "missing", k));
      }
      if (!pcount || *pcount != n_parts) {
        return make_error(fmt::format("{}: key '{}' is {}, expected {} (as in the other parts)",
                                      part_path, kKeySplitCount,
                                      pcount ? std::to_string(*pcount) : "missing", n_parts));
      }
    }
  }

  for (uint32_t k = 0; k < m.files_.size(); ++k) {
    for (const TensorInfo& t : m.files_[k]->tensors()) {
      if (auto it = m.tensor_index_.find(t.name); it != m.tensor_index_.end()) {
        return make_error(fmt::format("{}: tensor '{}' is also in part {} ({})",
                                      m.files_[k]->name(), t.name,
                                      m.tensors_[it->second].split_index + 1,
                                      m.files_[m.tensors_[it->second].split_index]->name()));
      }
      m.tensor_index_.emplace(t.name, m.tensors_.size());
      m.tensors_.push_back(t);
      m.tensors_.back().split_index = k;
    }
  }
  for (const auto& f : m.files_) {
    MINFER_TRY(std::optional<uint64_t> total,
               split_key(*f, kKeySplitTensorsCount, std::numeric_limits<int32_t>::max()));
    if (total && *total != m.tensors_.size()) {
      return make_error(fmt::format("{}: key '{}' is {} but the {} part(s) hold {} tensors",
                                    f->name(), kKeySplitTensorsCount, *total, m.files_.size(),
                                    m.tensors_.size()));
    }
  }
  return m;
}

const TensorInfo* Model::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

bool is_signed_int(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

Error type_error(const Model& m, std::string_view key, const Value& v, std::string_view want) {
  std::string got(value_type_name(v.type));
  if (v.type == ValueType::kArray) got += fmt::format(" of {}", value_type_name(v.array.type()));
  return make_error(fmt::format("{}: metadata key '{}' has type {}, expected {}",
                                m.primary().name(), key, got, want));
}

Result<const Value*> lookup(const Model& m, std::string_view key) {
  const Value* v = m.find(key);
  if (v == nullptr) {
    return make_error(fmt::format("{}: metadata key '{}' not found", m.primary().name(), key));
  }
  return v;
}

}  // namespace

Result<std::string> Model::get_string(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (v->type != ValueType::kString) return type_error(*this, key, *v, "string");
  return v->str;
}

Result<uint64_t> Model::get_u64(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (!v->is_integer()) return type_error(*this, key, *v, "an integer");
  if (is_signed_int(v->type)) {
    if (v->i < 0) {
      return make_error(fmt::format("{}: metadata key '{}' is {}, expected a value >= 0",
                                    primary().name(), key, v->i));
    }
    return static_cast<uint64_t>(v->i);
  }
  return v->u;
}

Result<int64_t> Model::get_i64(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (!v->is_integer()) return type_error(*this, key, *v, "an integer");
  if (is_signed_int(v->type)) return v->i;
  if (v->u > static_cast<uint64_t>(INT64_MAX)) {
    return make_error(fmt::format("{}: metadata key '{}' is {}, which does not fit in int64",
                                  primary().name(), key, v->u));
  }
  return static_cast<int64_t>(v->u);
}

Result<double> Model::get_f64(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (v->is_float()) return v->f;
  if (is_signed_int(v->type)) return static_cast<double>(v->i);
  if (v->is_integer()) return static_cast<double>(v->u);
  return type_error(*this, key, *v, "a number");
}

Result<bool> Model::get_bool(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (v->type != ValueType::kBool) return type_error(*this, key, *v, "bool");
  return v->u != 0;
}

Result<std::vector<std::string>> Model::get_string_array(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (v->type != ValueType::kArray || v->array.type() != ValueType::kString) {
    return type_error(*this, key, *v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (size_t k = 0; k < v->array.size(); ++k) out.emplace_back(v->array.string_at(k));
  return out;
}

Result<std::vector<float>> Model::get_f32_array(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  if (v->type != ValueType::kArray ||
      (v->array.type() != ValueType::kFloat32 && v->array.type() != ValueType::kFloat64)) {
    return type_error(*this, key, *v, "array of f32");
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (size_t k = 0; k < v->array.size(); ++k) {
    out.push_back(static_cast<float>(v->array.float_at(k)));
  }
  return out;
}

Result<std::vector<int32_t>> Model::get_i32_array(std::string_view key) const {
  MINFER_TRY(const Value* v, lookup(*this, key));
  const ValueType et = v->array.type();
  if (v->type != ValueType::kArray || et == ValueType::kArray || !Value{.type = et}.is_integer()) {
    return type_error(*this, key, *v, "array of integers");
  }
  std::vector<int32_t> out;
  out.reserve(v->array.size());
  for (size_t k = 0; k < v->array.size(); ++k) {
    const bool fits = is_signed_int(et)
                          ? v->array.int_at(k) >= INT32_MIN && v->array.int_at(k) <= INT32_MAX
                          : v->array.uint_at(k) <= INT32_MAX;
    if (!fits) {
      return make_error(
          fmt::format("{}: metadata key '{}' element #{} is {}, which does not fit "
                      "in int32",
                      primary().name(), key, k, v->array[k].to_display()));
    }
    out.push_back(static_cast<int32_t>(
        is_signed_int(et) ? v->array.int_at(k) : static_cast<int64_t>(v->array.uint_at(k))));
  }
  return out;
}

}  // namespace minfer::gguf
