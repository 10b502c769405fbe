// Stage 12 (CUDA backend): the Backend of one NVIDIA GPU — device memory (cudaMalloc),
// set/get on the context's one stream, fences from a ring of events created at init,
// kernels from kernel_list.h, and CUDA-graph capture/replay keyed by graph uid.
// Invariants: supports_op is exactly cuda_supports (cuda_plan.h: a kernel per accepted
// (op, dtype)); every transfer and kernel of this backend is queued on its one stream in
// call order; the host never reads device memory but through get, which waits; a
// captured split is replayed only while its uid lives and its addresses are unchanged.
// Status: compiled and linked on machines without a GPU; nothing here has run on a GPU
// yet (scripts/cuda-check.sh runs the device tests where one is present).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "backend/cuda/cuda_plan.h"
#include "core/result.h"

namespace minfer::backend::cuda {

struct CudaBackendOptions {
  int device = 0;           // CUDA device ordinal
  graph::BackendId id = 1;  // the node placement id the context gives it
  bool graphs = true;       // capture and replay CUDA graphs (MINFER_NO_CUDA_GRAPHS=1: off)
  uint32_t n_fences = 64;   // events in the fence ring
};

// The number of CUDA devices, or an Error carrying the runtime's reason (no driver,
// no device). Never prints.
Result<int> device_count();

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return name_; }
  graph::BackendId id() const override { return id_; }
  bool supports_op(const graph::Node& node, std::span<const DType> src_dtypes) const override;
  Status execute(const graph::ComputeGraph& graph, std::span<const graph::NodeId> nodes,
                 const NodeData& data) override;
  Status synchronize() override;
  Status prepare(const graph::ComputeGraph& graph) override;
  void release(uint64_t uid) override;

  bool host_addressable() const override { return false; }
  Result<void*> alloc_buffer(uint64_t bytes, uint64_t alignment) override;
  void free_buffer(void* ptr, uint64_t bytes) noexcept override;
  Status set(void* dst, const void* host_src, uint64_t bytes) override;
  Status get(void* host_dst, const void* src, uint64_t bytes) override;
  uint64_t record_fence() override;
  Status wait_fence(uint64_t token) override;

  const CaptureCache::Counters& capture_counters() const { return captures_.counters(); }

 private:
  struct Impl;
  CudaBackend(const CudaBackendOptions& options, std::unique_ptr<Impl> impl);
  Status grow_scratch(uint64_t bytes);
  Status launch_nodes(const graph::ComputeGraph& graph, std::span<const graph::NodeId> nodes);
  // The device error word (kernel bounds checks) after the stream synchronised: an Error
  // naming the node, and the word cleared.
  Status check_device_errors();

  std::string name_;
  graph::BackendId id_;
  int device_;
  CaptureCache captures_;
  FenceRing fences_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::backend::cuda
