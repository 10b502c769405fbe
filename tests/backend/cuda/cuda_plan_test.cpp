// Tests (CUDA backend, host only): the bookkeeping that compiles without nvcc and runs
// without a GPU — the capture cache keyed by graph uid, the fence ring, the supported
// (op, dtype) table against the kernel list, the scratch a graph needs.
#include "backend/cuda/cuda_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "graph/builder.h"

namespace minfer::backend::cuda {
namespace {

using graph::Node;
using graph::Op;

void* handle(uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

TEST(CudaCapture, FirstExecuteOfAUidCapturesLaterOnesReplayANewUidCapturesAgain) {
  CaptureCache c(true);
  const CaptureKey k1{.uid = 7, .first_node = 3, .n_nodes = 40};
  EXPECT_EQ(c.on_execute(k1, 11).action, CaptureCache::Action::kCapture);
  c.store(k1, 11, handle(0x100));
  for (int step = 0; step < 5; ++step) {
    const auto d = c.on_execute(k1, 11);
    EXPECT_EQ(d.action, CaptureCache::Action::kReplay);
    EXPECT_EQ(d.stale, nullptr);
  }
  EXPECT_EQ(c.find(k1), handle(0x100));
  // The rebuilt graph (fresh uid, same split) is captured, not replayed from the old one.
  const CaptureKey k2{.uid = 8, .first_node = 3, .n_nodes = 40};
  EXPECT_EQ(c.on_execute(k2, 11).action, CaptureCache::Action::kCapture);
  c.store(k2, 11, handle(0x200));
  // Another split of the same uid is its own capture.
  const CaptureKey k1b{.uid = 7, .first_node = 43, .n_nodes = 5};
  EXPECT_EQ(c.on_execute(k1b, 11).action, CaptureCache::Action::kCapture);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.counters().captures, 2u);
  EXPECT_EQ(c.counters().replays, 5u);
}

TEST(CudaCapture, ChangedAddressesRecaptureAndHandBackTheStaleGraph) {
  CaptureCache c(true);
  const CaptureKey k{.uid = 5, .first_node = 0, .n_nodes = 10};
  ASSERT_EQ(c.on_execute(k, 1).action, CaptureCache::Action::kCapture);
  c.store(k, 1, handle(0xA0));
  const auto d = c.on_execute(k, 2);
  EXPECT_EQ(d.action, CaptureCache::Action::kCapture);
  EXPECT_EQ(d.stale, handle(0xA0));
  EXPECT_EQ(c.find(k), nullptr);
  c.store(k, 2, handle(0xB0));
  EXPECT_EQ(c.on_execute(k, 2).action, CaptureCache::Action::kReplay);
  EXPECT_EQ(c.counters().recaptures, 1u);
}

TEST(CudaCapture, ReleaseFreesExactlyTheCapturesOfThatUid) {
  CaptureCache c(true);
  for (uint64_t uid : {1, 2}) {
    for (int32_t first : {0, 50}) {
      const CaptureKey k{.uid = uid, .first_node = first, .n_nodes = 50};
      ASSERT_EQ(c.on_execute(k, 9).action, CaptureCache::Action::kCapture);
      c.store(k, 9, handle(uid * 0x100 + static_cast<uint64_t>(first)));
    }
  }
  std::vector<void*> freed = c.release(1);
  std::sort(freed.begin(), freed.end());
  EXPECT_EQ(freed, (std::vector<void*>{handle(0x100), handle(0x100 + 50)}));
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.release(1).empty());
  // uid 2 still replays; a released uid would be captured again (never replayed stale).
  EXPECT_EQ(c.on_execute({.uid = 2, .first_node = 0, .n_nodes = 50}, 9).action,
            CaptureCache::Action::kReplay);
  EXPECT_EQ(c.on_execute({.uid = 1, .first_node = 0, .n_nodes = 50}, 9).action,
            CaptureCache::Action::kCapture);
  EXPECT_EQ(c.clear().size(), 2u);
  EXPECT_EQ(c.size(), 0u);
}

TEST(CudaCapture, GraphsOffOrAGraphWithoutUidLaunchDirectly) {
  CaptureCache off(false);  // MINFER_NO_CUDA_GRAPHS=1
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(off.on_execute({.uid = 4, .first_node = 0, .n_nodes = 8}, 1).action,
              CaptureCache::Action::kDirect);
  }
  EXPECT_EQ(off.size(), 0u);
  CaptureCache on(true);
  EXPECT_EQ(on.on_execute({.uid = 0, .first_node = 0, .n_nodes = 8}, 1).action,
            CaptureCache::Action::kDirect);
  EXPECT_EQ(on.counters().direct, 1u);
}

TEST(CudaCapture, FingerprintDependsOnEveryAddressAndItsOrder) {
  const std::vector<uint64_t> a = {0x1000, 0x2000, 0x3000};
  std::vector<uint64_t> b = a;
  EXPECT_EQ(fingerprint_addresses(a), fingerprint_addresses(b));
  b[2] += 256;
  EXPECT_NE(fingerprint_addresses(a), fingerprint_addresses(b));
  std::vector<uint64_t> c = {0x2000, 0x1000, 0x3000};
  EXPECT_NE(fingerprint_addresses(a), fingerprint_addresses(c));
}

TEST(CudaFence, TokensCycleTheRingAndAReusedSlotIsWaitedOnThroughALaterEvent) {
  FenceRing r(4);
  std::vector<uint32_t> slots;
  for (uint64_t t = 1; t <= 9; ++t) {
    const auto rec = r.record();
    EXPECT_EQ(rec.token, t);
    slots.push_back(rec.slot);
  }
  EXPECT_EQ(slots, (std::vector<uint32_t>{1, 2, 3, 0, 1, 2, 3, 0, 1}));
  // token 2's slot now holds token 6's event, recorded later on the same stream: waiting
  // on it waits at least as long as token 2 needs.
  auto s = r.wait_slot(2);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ(**s, 2u);
  auto latest = r.wait_slot(9);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(**latest, 1u);
}

TEST(CudaFence, TokenZeroWaitsForNothingAndANeverRecordedTokenIsAnError) {
  FenceRing r(8);
  auto z = r.wait_slot(0);
  ASSERT_TRUE(z.ok());
  EXPECT_FALSE(z->has_value());
  r.record();
  auto bad = r.wait_slot(2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("never recorded"), std::string::npos);
}

// The source dtypes a node of `op` reads when source 0 (source 1 for attention) has
// dtype `key`: the shapes the graph builder gives them.
std::vector<DType> sources_for(Op op, DType key) {
  switch (op) {
    case Op::kGetRows:
      return {key, DType::kI32};
    case Op::kMulMat:
      return {key, DType::kF32};
    case Op::kKvStore:
      return {key, DType::kF32, DType::kI32};
    case Op::kAttention:
      return {DType::kF32, key, key, DType::kI32};
    case Op::kRope:
      return {key, DType::kI32};
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kRmsNormMul:
      return {key, key};
    default:
      return {key};
  }
}

Node node_for(Op op, std::span<const DType> dts) {
  Node n;
  n.op = op;
  n.n_src = static_cast<int32_t>(dts.size());
  n.dtype = op == Op::kCont ? dts[0] : DType::kF32;
  n.shape = graph::Shape{64 * 4, 2};
  n.params.n_rot = 64;
  n.params.n_head = 4;
  n.params.n_head_kv = 2;
  return n;
}

TEST(CudaSupports, EveryAcceptedOpAndDtypeHasAKernelEntryAndEveryEntryIsReachable) {
  std::set<std::pair<Op, DType>> accepted;
  for (int o = 0; o < static_cast<int>(Op::kCount); ++o) {
    const auto op = static_cast<Op>(o);
    if (graph::op_is_leaf(op) || op == Op::kReshape || op == Op::kView) continue;
    for (uint32_t t = 0; t <= 40; ++t) {  // every GGML type id and beyond
      const auto key = static_cast<DType>(t);
      const std::vector<DType> dts = sources_for(op, key);
      const Node n = node_for(op, dts);
      if (!cuda_supports(n, dts)) continue;
      const KernelEntry* e = find_kernel(op, key_dtype(n, dts));
      ASSERT_NE(e, nullptr) << graph::op_name(op) << " " << dtype_name(key)
                            << " is accepted without a kernel";
      accepted.insert({e->op, e->dtype});
    }
  }
  for (const KernelEntry& e : kernel_entries()) {
    EXPECT_TRUE(accepted.count({e.op, e.dtype}) == 1)
        << "kernel " << e.name << " (" << graph::op_name(e.op) << ", " << dtype_name(e.dtype)
        << ") is never accepted by supports_op";
  }
}

TEST(CudaSupports, WhatHasNoKernelStaysOffTheDevice) {
  auto accepts = [](Op op, std::vector<DType> dts, auto&& tweak) {
    Node n = node_for(op, dts);
    tweak(n);
    return cuda_supports(n, dts);
  };
  auto none = [](Node&) {};
  EXPECT_TRUE(accepts(Op::kMulMat, {DType::kQ4_0, DType::kF32}, none));
  EXPECT_TRUE(accepts(Op::kMulMat, {DType::kQ4_K, DType::kF32}, none));
  EXPECT_TRUE(accepts(Op::kMulMat, {DType::kQ6_K, DType::kF32}, none));
  EXPECT_FALSE(accepts(Op::kMulMat, {DType::kQ2_K, DType::kF32}, none));  // not yet
  EXPECT_FALSE(accepts(Op::kMulMat, {DType::kQ3_K, DType::kF32}, none));
  EXPECT_TRUE(accepts(Op::kMulMat, {DType::kBF16, DType::kF32}, none));
  EXPECT_FALSE(accepts(Op::kGetRows, {DType::kQ4_K, DType::kI32}, none));
  EXPECT_FALSE(accepts(Op::kKvStore, {DType::kQ8_0, DType::kF32, DType::kI32}, none));
  EXPECT_TRUE(accepts(Op::kGeglu, {DType::kF32, DType::kF32}, none));
  // llama.cpp's FMA-contracted gelu table (--numerics llamacpp) has no CUDA twin
  EXPECT_FALSE(
      accepts(Op::kGeglu, {DType::kF32, DType::kF32}, [](Node& n) { n.params.ggml_f16 = 1; }));
  EXPECT_FALSE(accepts(Op::kMulMatId, {DType::kQ4_0, DType::kF32, DType::kI32}, none));
  EXPECT_TRUE(accepts(Op::kAttention, {DType::kF32, DType::kF16, DType::kF16, DType::kI32}, none));
  // mixed K / V cells, llama.cpp's f16 flash-attention numerics, a head past 256
  EXPECT_FALSE(accepts(Op::kAttention, {DType::kF32, DType::kF16, DType::kF32, DType::kI32}, none));
  EXPECT_FALSE(accepts(Op::kAttention, {DType::kF32, DType::kF16, DType::kF16, DType::kI32},
                       [](Node& n) { n.params.ggml_f16 = 1; }));
  EXPECT_FALSE(
      accepts(Op::kAttention, {DType::kF32, DType::kF32, DType::kF32, DType::kI32}, [](Node& n) {
        n.shape = graph::Shape{512 * 4, 1};
      }));
  EXPECT_FALSE(accepts(Op::kRope, {DType::kF32, DType::kI32}, [](Node& n) { n.params.n_rot = 3; }));
  EXPECT_TRUE(accepts(Op::kReshape, {DType::kQ4_K}, none));  // an alias runs no kernel
}

TEST(CudaSupports, AttentionSplitsAcrossBlocksOnlyForFewRowsOverALongRegion) {
  // a decode step of Qwen2.5-0.5B (14 heads, head 64) over 4096 cells: 8 splits
  EXPECT_EQ(attention_max_splits(4096, 1), 8);
  EXPECT_EQ(attention_split_bytes(1, 14, 64, 4096, 1), uint64_t{14} * 8 * (2 + 64) * 4);
  EXPECT_EQ(attention_max_splits(4096, 2), 16);                // two runs may reach twice the cells
  EXPECT_EQ(attention_split_bytes(1, 14, 64, 512, 1), 0u);     // one split: one block per row
  EXPECT_EQ(attention_split_bytes(512, 14, 64, 4096, 1), 0u);  // a prefill fills the GPU already
  EXPECT_EQ(attention_split_bytes(1, 14, 64, int64_t{1} << 26, 1), 0u);  // past the scratch cap
}

TEST(CudaSupports, ScratchHoldsTheLargestConvertedActivationOfTheBackendsMulMats) {
  graph::GraphBuilder b({.backend = 1});
  const auto x = b.input("x", DType::kF32, {896, 5});
  const auto wq = b.weight("wq", DType::kQ4_0, {896, 128});  // q8_0: 28 blocks · 34 B
  const auto wf = b.weight("wf", DType::kF16, {896, 64});    // f16: 896 · 2 B
  const auto w1 = b.weight("w1", DType::kQ4_1, {896, 32});   // q8_1: 28 · 36 B
  const auto w32 = b.weight("w32", DType::kF32, {896, 16});  // read in place
  b.mark_output(b.mul_mat(wq, x));
  b.mark_output(b.mul_mat(wf, x));
  b.mark_output(b.mul_mat(w1, x));
  b.mark_output(b.mul_mat(w32, x));
  const graph::ComputeGraph g = b.finish();
  EXPECT_EQ(scratch_bytes(g, 1), uint64_t{896} * 2 * 5);
  EXPECT_EQ(scratch_bytes(g, 0), 0u);  // none of its nodes is on backend 0
  EXPECT_EQ(activation_row_bytes(DType::kQ4_0, 896), 28u * 34);
  EXPECT_EQ(activation_row_bytes(DType::kQ5_1, 896), 28u * 36);
  EXPECT_EQ(activation_row_bytes(DType::kQ4_K, 1024), 4u * 292);
  EXPECT_EQ(activation_row_bytes(DType::kF32, 896), 0u);
}

}  // namespace
}  // namespace minfer::backend::cuda
