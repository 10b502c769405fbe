// Stage 18 (CLI): `minfer quantize IN.gguf OUT.gguf TYPE` — llama-quantize without an
// importance matrix: the same per-tensor type mix (llama.cpp's llama_tensor_get_type
// rules for the _S/_M/_L schemes, the output and tied-embedding rules, the fallbacks for
// rows that are not a multiple of the block size), the same tensor order (tensors
// without a layer first, then by layer, by name within each), the same metadata (every
// input key in order, general.quantization_version and general.file_type moved to the
// end, split keys dropped) and the same bytes (our reference quantizers are bit-exact
// with ggml's quantize_row_*_ref), so the output file is byte-identical to
// llama-quantize's for the same input.
// Not covered (refused or not reproduced): importance matrices and the IQ types that
// need them, MoE-specific rules (expert_count > 1), and llama.cpp's 70B-only attn_v bump.
// A quantized input is refused unless --allow-requantize (then each quantized tensor is
// dequantized to F32 and quantized again, as llama-quantize does).
// Invariants: the output is written to OUT.tmp and renamed when complete (never a half
// file under OUT), never over an input and over an existing file only with --force;
// rows are quantized independently, so the bytes do not depend on -t.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "files.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace minfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

// llama_ftype values (general.file_type).
enum class Ftype : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kBF16 = 32,
};

struct FtypeName {
  const char* name;
  Ftype ftype;
  DType base;
};

constexpr FtypeName kFtypes[] = {
    {"Q4_0", Ftype::kQ4_0, DType::kQ4_0},     {"Q4_1", Ftype::kQ4_1, DType::kQ4_1},
    {"Q5_0", Ftype::kQ5_0, DType::kQ5_0},     {"Q5_1", Ftype::kQ5_1, DType::kQ5_1},
    {"Q8_0", Ftype::kQ8_0, DType::kQ8_0},     {"Q2_K", Ftype::kQ2_K, DType::kQ2_K},
    {"Q3_K_S", Ftype::kQ3_K_S, DType::kQ3_K}, {"Q3_K_M", Ftype::kQ3_K_M, DType::kQ3_K},
    {"Q3_K_L", Ftype::kQ3_K_L, DType::kQ3_K}, {"Q4_K_S", Ftype::kQ4_K_S, DType::kQ4_K},
    {"Q4_K_M", Ftype::kQ4_K_M, DType::kQ4_K}, {"Q5_K_S", Ftype::kQ5_K_S, DType::kQ5_K},
    {"Q5_K_M", Ftype::kQ5_K_M, DType::kQ5_K}, {"Q6_K", Ftype::kQ6_K, DType::kQ6_K},
    {"F16", Ftype::kF16, DType::kF16},        {"BF16", Ftype::kBF16, DType::kBF16},
    {"F32", Ftype::kF32, DType::kF32},
};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::optional<FtypeName> ftype_from_name(const std::string& name) {
  std::string n = upper(name);
  // llama-quantize's aliases: Q3_K, Q4_K, Q5_K are the _M mixes.
  if (n == "Q3_K" || n == "Q4_K" || n == "Q5_K") n += "_M";
  for (const auto& f : kFtypes) {
    if (n == f.name) return f;
  }
  return std::nullopt;
}

std::string ftype_list() {
  std::string out;
  for (const auto& f : kFtypes) out += std::string(out.empty() ? "" : " ") + f.name;
  return out;
}

// --output-tensor-type / --token-embedding-type: a tensor type we can quantize to.
Result<DType> tensor_type_from_name(const std::string& name, const char* flag) {
  auto t = dtype_from_name(name);
  if (t && *t != DType::kQ8_K && quant::traits(*t) != nullptr &&
      quant::traits(*t)->quantize_ref != nullptr) {
    return *t;
  }
  return make_error(fmt::format(
      "{}: '{}' is not a tensor type we quantize to (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 "
      "q2_k q3_k q4_k q5_k q6_k)",
      flag, name));
}

bool is_quantized(DType t) {
  return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16;
}

uint64_t block_of(DType t) {
  return dtype_info(t).block_size;
}

enum class Category {
  kOutput,
  kTokenEmbd,
  kAttnQkv,
  kAttnKvB,
  kAttnV,
  kAttnK,
  kAttnQ,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOther
};

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    return Category::kTokenEmbd;
  }
  if (contains(name, "attn_qkv.weight")) return Category::kAttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::kAttnKvB;
  if (contains(name, "attn_v.weight")) return Category::kAttnV;
  if (contains(name, "attn_k.weight")) return Category::kAttnK;
  if (contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(name, "ffn_up")) return Category::kFfnUp;
  if (contains(name, "ffn_gate")) return Category::kFfnGate;
  if (contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

bool is_attn_v_like(Category c) {
  return c == Category::kAttnV || c == Category::kAttnQkv || c == Category::kAttnKvB;
}

// Dimensions as ggml counts them: trailing 1s do not count (ggml_n_dims), at least one.
size_t n_dims(const std::vector<uint64_t>& dims) {
  size_t n = dims.size();
  while (n > 1 && dims[n - 1] == 1) --n;
  return n;
}

// llama.cpp's tensor_allows_quantization for the architectures minfer reads, and the
// names it excludes for every architecture.
bool allows_quantization(const gguf::TensorInfo& t) {
  if (n_dims(t.dims) < 2) return false;
  const std::string& name = t.name;
  bool q = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
  for (std::string_view bad : {"_norm.weight",
                               "ffn_gate_inp.weight",
                               "ffn_gate_tid2eid.weight",
                               "altup",
                               "laurel",
                               "per_layer_model_proj",
                               "ssm_conv1d",
                               "shortconv.conv.weight",
                               "indexer.k_proj.weight",
                               "indexer.q_proj.weight",
                               "time_mix_first.weight",
                               "time_mix_w0.weight",
                               "time_mix_w1.weight",
                               "time_mix_w2.weight",
                               "time_mix_v0.weight",
                               "time_mix_v1.weight",
                               "time_mix_v2.weight",
                               "time_mix_a0.weight",
                               "time_mix_a1.weight",
                               "time_mix_a2.weight",
                               "time_mix_g1.weight",
                               "time_mix_g2.weight",
                               "time_mix_decay_w1.weight",
                               "time_mix_decay_w2.weight",
                               "time_mix_lerp_fused.weight",
                               "attn_rel_b.weight",
                               ".position_embd",
                               "sam.pos_embd",
                               "sam.neck.",
                               "sam.net_",
                               ".rel_pos",
                               ".patch_embd",
                               ".patch_merger",
                               "a.rvq.codebook",
                               "mm.a.code_embd"}) {
    q = q && !contains(name, bad);
  }
  q = q && name != "position_embd.weight" && name != "token_types.weight";
  return q;
}

struct MixState {
  Ftype ftype;
  bool falcon = false;
  uint32_t n_gqa = 0;
  int n_attention_wv = 0, i_attention_wv = 0;
  int n_layer = 0, i_ffn_down = 0;
  bool tied = true;  // no output.weight: the token embedding is the LM head
  std::optional<DType> output_type, token_embd_type;
  bool pure = false;
  int n_fallback = 0;
};

bool use_more_bits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// llama_tensor_get_type_impl, for the k-quant and legacy mixes (no imatrix, no IQ types).
DType mix_type(MixState& qs, DType new_type, const gguf::TensorInfo& t, Category cat) {
  const Ftype ft = qs.ftype;
  if (cat == Category::kOutput || (qs.tied && cat == Category::kTokenEmbd)) {
    if (qs.output_type) {
      new_type = *qs.output_type;
    } else {
      const uint64_t nx = t.dims[0];
      if (qs.falcon || nx % block_of(new_type) != 0) {
        new_type = DType::kQ8_0;
      } else if (new_type != DType::kQ8_0) {
        new_type = DType::kQ6_K;
      }
    }
  } else if (cat == Category::kTokenEmbd) {
    if (qs.token_embd_type) new_type = *qs.token_embd_type;
  } else if (is_attn_v_like(cat)) {
    if (ft == Ftype::kQ2_K) {
      new_type = qs.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
    } else if (ft == Ftype::kQ3_K_M) {
      new_type = qs.i_attention_wv < 2 ? DType::kQ5_K : DType::kQ4_K;
    } else if (ft == Ftype::kQ3_K_L) {
      new_type = DType::kQ5_K;
    } else if ((ft == Ftype::kQ4_K_M || ft == Ftype::kQ5_K_M) &&
               use_more_bits(qs.i_attention_wv, qs.n_attention_wv)) {
      new_type = DType::kQ6_K;
    } else if (ft == Ftype::kQ4_K_S && qs.i_attention_wv < 4) {
      new_type = DType::kQ5_K;
    }
    ++qs.i_attention_wv;
  } else if (cat == Category::kFfnDown) {
    const int i_layer = qs.i_ffn_down, n_layer = qs.n_layer;
    if (ft == Ftype::kQ2_K) {
      new_type = DType::kQ3_K;
    } else if (ft == Ftype::kQ3_K_M) {
      new_type = i_layer < n_layer / 16                          ? DType::kQ5_K
                 : !qs.falcon || use_more_bits(i_layer, n_layer) ? DType::kQ4_K
                                                                 : DType::kQ3_K;
    } else if (ft == Ftype::kQ3_K_L) {
      new_type = qs.falcon ? DType::kQ4_K : DType::kQ5_K;
    } else if (ft == Ftype::kQ4_K_M) {
      if (qs.falcon) {
        new_type = i_layer < n_layer / 16            ? DType::kQ6_K
                   : use_more_bits(i_layer, n_layer) ? DType::kQ5_K
                                                     : DType::kQ4_K;
      } else if (use_more_bits(i_layer, n_layer)) {
        new_type = DType::kQ6_K;
      }
    } else if (ft == Ftype::kQ5_K_M && use_more_bits(i_layer, n_layer)) {
      new_type = DType::kQ6_K;
    } else if (ft == Ftype::kQ4_K_S && !qs.falcon && i_layer < n_layer / 8) {
      new_type = DType::kQ5_K;
    }
    ++qs.i_ffn_down;
  } else if (cat == Category::kAttnOutput) {
    if (!qs.falcon) {
      if (ft == Ftype::kQ2_K) {
        new_type = DType::kQ3_K;
      } else if (ft == Ftype::kQ3_K_M) {
        new_type = DType::kQ4_K;
      } else if (ft == Ftype::kQ3_K_L) {
        new_type = DType::kQ5_K;
      }
    } else if (ft == Ftype::kQ3_K_L) {
      new_type = DType::kQ4_K;
    }
  } else if (cat == Category::kAttnQkv) {
    // (attn_qkv is attn_v-like and handled above, as in llama.cpp, where this branch is
    // unreachable for it.)
  }
  return new_type;
}

// tensor_type_fallback: a row length the block size does not divide.
DType fallback(MixState& qs, const gguf::TensorInfo& t, DType target) {
  const uint64_t ncols = t.dims[0];
  if (ncols % block_of(target) == 0) return target;
  ++qs.n_fallback;
  const DType r = quant::tensor_type_fallback(target, ncols);
  fmt::print(stderr,
             "warning: {:<36} - ncols {:6} not divisible by {:3} (required for type {:>7}) "
             "-> falling back to {:>7}\n",
             t.name, ncols, block_of(target), dtype_name(target), dtype_name(r));
  return r;
}

// llama_tensor_get_type.
DType target_type(MixState& qs, DType default_type, const gguf::TensorInfo& t) {
  if (!allows_quantization(t)) return t.type;
  const Category cat = category_of(t.name);
  if (qs.token_embd_type && cat == Category::kTokenEmbd) return *qs.token_embd_type;
  if (qs.output_type && cat == Category::kOutput) return *qs.output_type;
  DType new_type = default_type;
  if (is_quantized(default_type)) {
    if (!qs.pure) new_type = mix_type(qs, new_type, t, cat);
    new_type = fallback(qs, t, new_type);
  }
  return new_type;
}

// llama_model_loader's order: tensors without a block number first, then by block,
// by name within each.
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < gguf::kMaxDims; ++i) {
    const uint64_t d = i < dims.size() ? dims[i] : 1;
    s += fmt::format("{}{:6}", i ? ", " : "", d);
  }
  return s;
}

Result<uint64_t> arch_u64(const gguf::Model& m, const std::string& arch, const char* key,
                          uint64_t fallback_value) {
  const std::string k = arch + "." + key;
  const gguf::Value* v = m.find(k);
  if (v == nullptr) return fallback_value;
  if (v->type == gguf::ValueType::kArray) {
    if (v->array.empty() || !v->array[0].is_integer()) {
      return make_error("'" + k + "' is not an integer array");
    }
    const gguf::Value& e = v->array[0];
    return e.type == gguf::ValueType::kInt8 || e.type == gguf::ValueType::kInt16 ||
                   e.type == gguf::ValueType::kInt32 || e.type == gguf::ValueType::kInt64
               ? static_cast<uint64_t>(std::max<int64_t>(e.i, 0))
               : e.u;
  }
  return m.get_u64(k);
}

// Converts `n_rows` rows of `src` (type `from`) to `to` on `threads` threads; rows are
// independent, so the bytes do not depend on the thread count.
Status convert_rows(DType from, DType to, const uint8_t* src, uint8_t* dst, uint64_t n_rows,
                    uint64_t n_per_row, int threads) {
  MINFER_TRY(const uint64_t src_row, quant::row_bytes(from, n_per_row));
  MINFER_TRY(const uint64_t dst_row, quant::row_bytes(to, n_per_row));
  // Chunks of at least 16k elements, as llama-quantize hands them to its threads.
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, (32 * 512 + n_per_row - 1) / n_per_row);
  const uint64_t n_chunks = (n_rows + rows_per_chunk - 1) / rows_per_chunk;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::string error;
  auto work = [&] {
    std::vector<float> f32;
    while (!failed) {
      const uint64_t c = next++;
      if (c >= n_chunks) break;
      const uint64_t r0 = c * rows_per_chunk;
      const uint64_t nr = std::min(rows_per_chunk, n_rows - r0);
      const size_t n = static_cast<size_t>(nr * n_per_row);
      f32.resize(n);
      Status st = quant::dequantize(from, {src + r0 * src_row, nr * src_row}, f32);
      if (st.ok()) st = quant::quantize(to, f32, {dst + r0 * dst_row, nr * dst_row});
      if (!st.ok() && !failed.exchange(true)) error = st.error().message;
    }
  };
  std::vector<std::thread> pool;
  const int n_threads = static_cast<int>(std::min<uint64_t>(std::max(threads, 1), n_chunks));
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (failed) return make_error(error);
  return Ok{};
}

}  // namespace

int run_quantize(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer quantize IN.gguf OUT.gguf TYPE [flags]\n"
      "llama-quantize without an importance matrix: the same per-tensor type mix and the\n"
      "same bytes. TYPE: " +
      ftype_list() + " (Q3_K, Q4_K, Q5_K are the _M mixes)");
  bool pure = false;
  std::string output_type_name, token_embd_type_name;
  int32_t n_threads = 0;
  p.flag("--pure",
         "every quantizable tensor in TYPE's base type: no per-tensor mix (the\n"
         "row-length fallbacks still apply)",
         [&] { pure = true; });
  p.string_opt("--output-tensor-type", "T", "type of output.weight (and of a tied embedding)",
               output_type_name);
  p.string_opt("--token-embedding-type", "T", "type of token_embd.weight", token_embd_type_name);
  p.int_opt("-t,--threads", "N", "threads (all cores)", n_threads, 1, 4096);
  bool allow_requantize = false, force = false;
  p.flag("--allow-requantize",
         "quantize tensors that are already quantized (dequantized to F32 first, as\n"
         "llama-quantize does): the result carries both roundings, worse than quantizing\n"
         "from F32/F16/BF16",
         [&] { allow_requantize = true; });
  p.flag("--force", "replace an existing OUT.gguf (never the input)", [&] { force = true; });
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  const auto& pos = parsed.positionals;
  if (pos.size() != 3) {
    return fail(
        fmt::format("quantize: expected IN.gguf OUT.gguf TYPE, got {} argument(s)", pos.size()));
  }
  const std::string& in_path = pos[0];
  const std::string& out_path = pos[1];
  const auto ft = ftype_from_name(pos[2]);
  if (!ft) return fail("quantize: unknown TYPE '" + pos[2] + "' (one of: " + ftype_list() + ")");
  MixState qs{.ftype = ft->ftype};
  qs.pure = pure;
  if (!output_type_name.empty()) {
    auto t = tensor_type_from_name(output_type_name, "--output-tensor-type");
    if (!t) return fail(t.error().message);
    qs.output_type = *t;
  }
  if (!token_embd_type_name.empty()) {
    auto t = tensor_type_from_name(token_embd_type_name, "--token-embedding-type");
    if (!t) return fail(t.error().message);
    qs.token_embd_type = *t;
  }
  if (n_threads <= 0)
    n_threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (auto st = check_model_file(in_path); !st.ok()) return fail(st.error().message);
  auto opened = gguf::Model::open(in_path);
  if (!opened) return fail(opened.error().message);
  const gguf::Model& m = *opened;
  {
    std::vector<std::string> inputs;
    for (const auto& f : m.files()) inputs.push_back(f->name());
    if (auto st = check_new_output(out_path, inputs, force, "OUT.gguf"); !st.ok()) {
      return fail("quantize: " + st.error().message);
    }
  }

  auto arch = m.get_string("general.architecture");
  if (!arch) return fail("quantize: " + arch.error().message);
  qs.falcon = *arch == "falcon";
  auto n_expert = arch_u64(m, *arch, "expert_count", 0);
  if (!n_expert) return fail("quantize: " + n_expert.error().message);
  if (*n_expert > 1) {
    return fail(
        fmt::format("quantize: {} has {} experts; llama-quantize's MoE rules are not "
                    "reproduced here",
                    in_path, *n_expert));
  }
  auto n_layer = arch_u64(m, *arch, "block_count", 0);
  auto n_head = arch_u64(m, *arch, "attention.head_count", 0);
  if (!n_layer || !n_head) return fail("quantize: cannot read the layer and head counts");
  auto n_head_kv = arch_u64(m, *arch, "attention.head_count_kv", *n_head);
  if (!n_head_kv) return fail("quantize: " + n_head_kv.error().message);
  qs.n_layer = static_cast<int>(*n_layer);
  qs.n_gqa = *n_head_kv == 0 ? 0 : static_cast<uint32_t>(*n_head / *n_head_kv);

  // Tensors in llama_model_loader's order.
  std::vector<const gguf::TensorInfo*> order;
  for (const auto& t : m.tensors()) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const gguf::TensorInfo* a, const gguf::TensorInfo* b) {
                     const int la = layer_of(a->name), lb = layer_of(b->name);
                     if (la != lb) return la < lb;
                     return a->name < b->name;
                   });
  for (const auto* t : order) {
    const Category c = category_of(t->name);
    if (is_attn_v_like(c)) ++qs.n_attention_wv;
    if (c == Category::kOutput) qs.tied = false;
  }

  // Types first (the header needs every size), then the data.
  std::vector<DType> targets;
  std::vector<gguf::StreamWriter::TensorDecl> decls;
  int n_requantized = 0;
  for (const auto* t : order) {
    const DType target = target_type(qs, ft->base, *t);
    if (target != t->type) {
      if (is_quantized(t->type) && !allow_requantize) {
        return fail(
            fmt::format("quantize: {} is {}: requantizing a quantized tensor loses quality "
                        "(quantize from an F32/F16/BF16 model, or pass --allow-requantize)",
                        t->name, dtype_name(t->type)));
      }
      if (is_quantized(t->type)) ++n_requantized;
      if (quant::traits(t->type) == nullptr) {
        return fail(fmt::format("quantize: {} has type {}, which we cannot read", t->name,
                                dtype_name(t->type)));
      }
    }
    targets.push_back(target);
    std::vector<uint64_t> dims(t->dims.begin(),
                               t->dims.begin() + static_cast<long>(n_dims(t->dims)));
    decls.push_back({t->name, target, std::move(dims)});
  }

  std::vector<gguf::KeyValue> kvs;
  for (const auto& kv : m.metadata()) {
    if (kv.key == "general.quantization_version" || kv.key == "general.file_type" ||
        kv.key == gguf::kKeySplitNo || kv.key == gguf::kKeySplitCount ||
        kv.key == gguf::kKeySplitTensorsCount) {
      continue;
    }
    kvs.push_back(kv);
  }
  kvs.push_back({"general.quantization_version", gguf::Value::u32(2)});  // GGML_QNT_VERSION
  kvs.push_back({"general.file_type", gguf::Value::u32(static_cast<uint32_t>(ft->ftype))});

  if (n_requantized > 0) {
    fmt::print(stderr,
               "quantize: WARNING: requantizing {} tensor(s) that are already quantized; the "
               "result is worse than quantizing from F32/F16/BF16\n",
               n_requantized);
  }
  auto writer = gguf::StreamWriter::create(out_path, kvs, decls);
  if (!writer) return fail("quantize: " + writer.error().message);
  const auto t0 = Clock::now();
  uint64_t size_in = 0, size_out = 0, n_elements = 0;
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < order.size(); ++i) {
    const gguf::TensorInfo& t = *order[i];
    const DType to = targets[i];
    std::string line = fmt::format("[{:4}/{:4}] {:<36} - [{}], type = {:>6}, ", i + 1, order.size(),
                                   t.name, shape_text(t.dims), dtype_name(t.type));
    size_in += t.n_bytes;
    n_elements += t.n_elements;
    if (to == t.type) {
      if (auto st = (*writer)->write({t.data, t.n_bytes}); !st.ok()) {
        return fail("quantize: " + st.error().message);
      }
      size_out += t.n_bytes;
      line += fmt::format("size = {:8.3f} MiB", t.n_bytes / 1024.0 / 1024.0);
    } else {
      auto nbytes = gguf::tensor_nbytes(to, decls[i].dims);
      if (!nbytes) return fail("quantize: " + t.name + ": " + nbytes.error().message);
      buf.resize(*nbytes);
      const uint64_t n_per_row = t.dims[0];
      if (auto st = convert_rows(t.type, to, t.data, buf.data(), t.n_elements / n_per_row,
                                 n_per_row, n_threads);
          !st.ok()) {
        return fail("quantize: " + t.name + ": " + st.error().message);
      }
      if (auto st = (*writer)->write(buf); !st.ok()) return fail("quantize: " + st.error().message);
      size_out += *nbytes;
      line += fmt::format("converting to {} .. size = {:8.2f} MiB -> {:8.2f} MiB", dtype_name(to),
                          t.n_bytes / 1024.0 / 1024.0, *nbytes / 1024.0 / 1024.0);
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
  if (auto st = (*writer)->finish(); !st.ok()) return fail("quantize: " + st.error().message);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  fmt::print("quantize: model size  = {:8.2f} MiB ({:.2f} BPW)\n", size_in / 1024.0 / 1024.0,
             size_in * 8.0 / static_cast<double>(n_elements));
  fmt::print("quantize: quant size  = {:8.2f} MiB ({:.2f} BPW)\n", size_out / 1024.0 / 1024.0,
             size_out * 8.0 / static_cast<double>(n_elements));
  if (qs.n_fallback > 0) {
    fmt::print(stderr, "quantize: WARNING: {} of {} tensor(s) required fallback quantization\n",
               qs.n_fallback, order.size());
  }
  fmt::print("quantize: {} tensors in {:.2f} s with {} thread(s)\n", order.size(), secs, n_threads);
  return 0;
}

}  // namespace minfer::cli
