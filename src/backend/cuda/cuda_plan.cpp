// Stage 12 (CUDA backend): host-side bookkeeping (see cuda_plan.h). Plain C++.
#include "backend/cuda/cuda_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace minfer::backend::cuda {

using graph::Node;
using graph::Op;

namespace {

#define MINFER_CUDA_ENTRY(op, dtype, name) KernelEntry{Op::op, DType::dtype, #name},
constexpr std::array kEntries = {MINFER_CUDA_KERNELS(MINFER_CUDA_ENTRY)};
#undef MINFER_CUDA_ENTRY

}  // namespace

std::span<const KernelEntry> kernel_entries() {
  return kEntries;
}

const KernelEntry* find_kernel(Op op, DType key) {
  for (const KernelEntry& e : kEntries) {
    if (e.op == op && e.dtype == key) return &e;
  }
  return nullptr;
}

DType key_dtype(const Node& node, std::span<const DType> dts) {
  switch (node.op) {
    case Op::kGetRows:
    case Op::kKvStore:
    case Op::kMulMat:
      return dts.empty() ? DType::kF32 : dts[0];
    case Op::kAttention:
      return dts.size() < 2 ? DType::kF32 : dts[1];
    default:
      return DType::kF32;
  }
}

bool cuda_supports(const Node& n, std::span<const DType> dts) {
  if (static_cast<int>(dts.size()) != n.n_src) return false;
  if (n.op == Op::kReshape || n.op == Op::kView) return true;  // aliases: no kernel
  if (find_kernel(n.op, key_dtype(n, dts)) == nullptr) return false;
  auto all_f32 = [&] {
    return std::all_of(dts.begin(), dts.end(), [](DType d) { return d == DType::kF32; }) &&
           n.dtype == DType::kF32;
  };
  switch (n.op) {
    case Op::kRmsNorm:
    case Op::kRmsNormMul:
    case Op::kSoftmax:
    case Op::kAdd:
    case Op::kMul:
    case Op::kScale:
    case Op::kSilu:
    case Op::kSwiglu:
    case Op::kTanh:
      return all_f32();
    case Op::kGeglu:
    case Op::kGelu:
      // the default numerics' table (ggml_f16: llama.cpp's FMA-contracted one stays on the CPU)
      return all_f32() && n.params.ggml_f16 == 0;
    case Op::kCont:
      return dts.size() == 1 && dts[0] == n.dtype;
    case Op::kGetRows:
      return dts.size() == 2 && dts[1] == DType::kI32 && n.dtype == DType::kF32;
    case Op::kRope:
      return dts.size() == 2 && dts[0] == DType::kF32 && dts[1] == DType::kI32 &&
             n.params.n_rot > 0 && n.params.n_rot % 2 == 0 && n.params.n_rot <= n.shape.ne[0];
    case Op::kKvStore:
      return dts.size() == 3 && dts[1] == DType::kF32 && dts[2] == DType::kI32;
    case Op::kAttention: {
      // The default numerics only (ggml_f16 is llama.cpp's CPU flash attention); K and V
      // cells of one dtype; a head's output in the kernel's registers.
      if (dts.size() != 4 || dts[0] != DType::kF32 || dts[1] != dts[2] || dts[3] != DType::kI32 ||
          n.params.ggml_f16 != 0 || n.params.n_head <= 0 || n.params.n_head_kv <= 0 ||
          n.params.n_head % n.params.n_head_kv != 0 || n.shape.ne[0] % n.params.n_head != 0) {
        return false;
      }
      return n.shape.ne[0] / n.params.n_head <= kMaxHeadDim;
    }
    case Op::kMulMat:
      return dts.size() == 2 && dts[1] == DType::kF32 && n.dtype == DType::kF32;
    default:
      return false;
  }
}

DType activation_type(DType weight) {
  switch (weight) {
    case DType::kF16:
      return DType::kF16;
    case DType::kBF16:
      return DType::kBF16;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
      return DType::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1:
      return DType::kQ8_1;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DType::kQ8_K;
    default:
      return DType::kF32;
  }
}

uint64_t activation_row_bytes(DType weight, int64_t k) {
  const auto n = static_cast<uint64_t>(k);
  switch (activation_type(weight)) {
    case DType::kF16:
    case DType::kBF16:
      return 2 * n;
    case DType::kQ8_0:
      return n / 32 * 34;  // ggml block_q8_0: f16 d + 32 int8
    case DType::kQ8_1:
      return n / 32 * 36;  // block_q8_1: f16 d, f16 s + 32 int8
    case DType::kQ8_K:
      return n / 256 * 292;  // block_q8_K: f32 d + 256 int8 + 16 int16 sums
    default:
      return 0;  // F32 weights read the activations in place
  }
}

int64_t attention_max_splits(int64_t n_cells, int64_t n_runs) {
  return std::max<int64_t>(1, (n_cells * n_runs + kAttentionSplitCells - 1) / kAttentionSplitCells);
}

uint64_t attention_split_bytes(int64_t n_tok, int64_t n_head, int64_t hd_v, int64_t n_cells,
                               int64_t n_runs) {
  const int64_t rows = n_tok * n_head;
  const int64_t splits = attention_max_splits(n_cells, n_runs);
  if (rows <= 0 || rows >= kAttentionSplitRowsMax || splits <= 1) return 0;
  const uint64_t bytes = static_cast<uint64_t>(rows * splits * (2 + hd_v)) * sizeof(float);
  return bytes <= kAttentionSplitBytesMax ? bytes : 0;
}

uint64_t node_scratch_bytes(const graph::ComputeGraph& g, graph::NodeId id) {
  const Node& n = g.node(id);
  if (n.op == Op::kMulMat) {
    const Node& w = g.node(n.src[0]);
    const Node& x = g.node(n.src[1]);
    return activation_row_bytes(w.dtype, w.shape.ne[0]) * static_cast<uint64_t>(x.shape.n_rows());
  }
  if (n.op == Op::kAttention && n.params.n_head_kv > 0) {
    const Node& q = g.node(n.src[0]);
    const Node& k = g.node(n.src[1]);
    const Node& v = g.node(n.src[2]);
    const Node& win = g.node(n.src[3]);
    return attention_split_bytes(q.shape.ne[2], n.params.n_head, v.shape.ne[0] / n.params.n_head_kv,
                                 k.shape.ne[1], win.shape.ne[0] / 2);
  }
  return 0;
}

uint64_t scratch_bytes(const graph::ComputeGraph& g, graph::BackendId backend) {
  uint64_t most = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g.nodes()[i].backend != backend) continue;
    most = std::max(most, node_scratch_bytes(g, static_cast<graph::NodeId>(i)));
  }
  return most;
}

CaptureCache::Decision CaptureCache::on_execute(const CaptureKey& key, uint64_t fingerprint) {
  if (!enabled_ || key.uid == 0) {
    counters_.direct++;
    return {};
  }
  for (Entry& e : entries_) {
    if (!(e.key == key)) continue;
    if (e.fingerprint == fingerprint) {
      counters_.replays++;
      return {.action = Action::kReplay};
    }
    void* stale = e.exec;
    e = entries_.back();
    entries_.pop_back();
    counters_.recaptures++;
    return {.action = Action::kCapture, .stale = stale};
  }
  return {.action = Action::kCapture};
}

void CaptureCache::store(const CaptureKey& key, uint64_t fingerprint, void* exec) {
  counters_.captures++;
  entries_.push_back(Entry{.key = key, .fingerprint = fingerprint, .exec = exec});
}

void* CaptureCache::find(const CaptureKey& key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return e.exec;
  }
  return nullptr;
}

std::vector<void*> CaptureCache::release(uint64_t uid) {
  std::vector<void*> out;
  std::erase_if(entries_, [&](const Entry& e) {
    if (e.key.uid != uid) return false;
    out.push_back(e.exec);
    return true;
  });
  counters_.released += out.size();
  return out;
}

std::vector<void*> CaptureCache::clear() {
  std::vector<void*> out;
  for (const Entry& e : entries_) out.push_back(e.exec);
  counters_.released += out.size();
  entries_.clear();
  return out;
}

uint64_t fingerprint_addresses(std::span<const uint64_t> addresses) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t a : addresses) {
    for (int b = 0; b < 8; ++b) {
      h ^= (a >> (8 * b)) & 0xFF;
      h *= 1099511628211ull;
    }
  }
  return h;
}

FenceRing::FenceRing(uint32_t n_slots) : n_slots_(std::max<uint32_t>(1, n_slots)) {}

FenceRing::Record FenceRing::record() {
  ++last_;
  return {.token = last_, .slot = static_cast<uint32_t>(last_ % n_slots_)};
}

Result<std::optional<uint32_t>> FenceRing::wait_slot(uint64_t token) const {
  if (token == 0) return std::optional<uint32_t>{};
  if (token > last_) {
    return make_error(fmt::format("cuda fence {} was never recorded (last {})", token, last_));
  }
  return std::optional<uint32_t>{static_cast<uint32_t>(token % n_slots_)};
}

}  // namespace minfer::backend::cuda
