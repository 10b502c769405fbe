// Stage 12 (CUDA backend): CudaBackend (see cuda_backend.h) and the device registration.
// Host C++ over the CUDA runtime API; the kernels live in the .cu files.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "backend/cuda/cuda_devices.h"
#include "backend/cuda/kernel_list.h"
#include "backend/registry.h"
#include "core/config.h"

namespace minfer::backend::cuda {

using graph::Node;
using graph::NodeId;
using graph::Op;

namespace {

struct DispatchEntry {
  Op op;
  DType dtype;
  LaunchFn fn;
};
#define MINFER_CUDA_DISPATCH(op, dtype, name) DispatchEntry{Op::op, DType::dtype, &launch_##name},
constexpr std::array kDispatch = {MINFER_CUDA_KERNELS(MINFER_CUDA_DISPATCH)};
#undef MINFER_CUDA_DISPATCH

LaunchFn find_launcher(Op op, DType key) {
  for (const DispatchEntry& e : kDispatch) {
    if (e.op == op && e.dtype == key) return e.fn;
  }
  return nullptr;
}

Status cuda_status(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return Ok{};
  return make_error(fmt::format("{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e)));
}

std::string_view device_error_name(int32_t code) {
  switch (static_cast<DeviceError>(code)) {
    case DeviceError::kRowId:
      return "row id out of range";
    case DeviceError::kCell:
      return "KV cell out of range";
    case DeviceError::kWindow:
      return "window run out of range";
    case DeviceError::kNone:
      break;
  }
  return "unknown device error";
}

struct Pending {
  NodeLaunch launch;
  LaunchFn fn = nullptr;
};

}  // namespace

struct CudaBackend::Impl {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  int32_t* err_host = nullptr;  // mapped pinned memory: the kernels' error word
  int32_t* err_dev = nullptr;
  void* scratch = nullptr;
  uint64_t scratch_bytes = 0;
  std::vector<Pending> pending;     // reused every execute (no allocation once warm)
  std::vector<uint64_t> addresses;  // the split's addresses (capture fingerprint)
  std::vector<std::string> names;   // node names of the last graph executed, for errors
  uint64_t names_uid = 0;
  Status sticky = Ok{};  // a failure of record_fence, returned by the next wait
};

Result<int> device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the runtime's last error
    return make_error(fmt::format("no CUDA device: {}", cudaGetErrorString(e)));
  }
  if (n == 0) return make_error("no CUDA device");
  return n;
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& o) {
  MINFER_TRY(int n, device_count());
  if (o.device < 0 || o.device >= n) {
    return make_error(fmt::format("cuda: device {} does not exist ({} found)", o.device, n));
  }
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(o.device), "cudaSetDevice"));
  auto impl = std::make_unique<Impl>();
  // Owned by the backend from here on: the destructor releases whatever was created.
  std::unique_ptr<CudaBackend> b(new CudaBackend(o, std::move(impl)));
  Impl& im = *b->impl_;
  MINFER_TRY_STATUS(cuda_status(cudaStreamCreateWithFlags(&im.stream, cudaStreamNonBlocking),
                                "cudaStreamCreate"));
  im.events.reserve(b->fences_.n_slots());
  for (uint32_t i = 0; i < b->fences_.n_slots(); ++i) {
    cudaEvent_t ev = nullptr;
    MINFER_TRY_STATUS(
        cuda_status(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
    im.events.push_back(ev);
  }
  void* err = nullptr;
  MINFER_TRY_STATUS(
      cuda_status(cudaHostAlloc(&err, 4 * sizeof(int32_t), cudaHostAllocMapped), "cudaHostAlloc"));
  im.err_host = static_cast<int32_t*>(err);
  std::fill(im.err_host, im.err_host + 4, 0);
  void* dev = nullptr;
  MINFER_TRY_STATUS(
      cuda_status(cudaHostGetDevicePointer(&dev, err, 0), "cudaHostGetDevicePointer"));
  im.err_dev = static_cast<int32_t*>(dev);
  return b;
}

CudaBackend::CudaBackend(const CudaBackendOptions& o, std::unique_ptr<Impl> impl)
    : name_(fmt::format("cuda{}", o.device)),
      id_(o.id),
      device_(o.device),
      captures_(o.graphs),
      fences_(o.n_fences),
      impl_(std::move(impl)) {}

CudaBackend::~CudaBackend() {
  Impl& im = *impl_;
  (void)cudaSetDevice(device_);
  if (im.stream != nullptr) (void)cudaStreamSynchronize(im.stream);
  for (void* exec : captures_.clear())
    (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  for (cudaEvent_t ev : im.events) (void)cudaEventDestroy(ev);
  if (im.scratch != nullptr) (void)cudaFree(im.scratch);
  if (im.err_host != nullptr) (void)cudaFreeHost(im.err_host);
  if (im.stream != nullptr) (void)cudaStreamDestroy(im.stream);
}

bool CudaBackend::supports_op(const Node& node, std::span<const DType> src_dtypes) const {
  return cuda_supports(node, src_dtypes);
}

Status CudaBackend::grow_scratch(uint64_t bytes) {
  Impl& im = *impl_;
  if (bytes <= im.scratch_bytes) return Ok{};
  // Captured graphs point at the old scratch: drop them before it goes.
  MINFER_TRY_STATUS(cuda_status(cudaStreamSynchronize(im.stream), "cudaStreamSynchronize"));
  for (void* exec : captures_.clear())
    (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (im.scratch != nullptr) (void)cudaFree(im.scratch);
  im.scratch = nullptr;
  im.scratch_bytes = 0;
  MINFER_TRY_STATUS(cuda_status(cudaMalloc(&im.scratch, bytes),
                                fmt::format("{}: scratch of {} bytes", name_, bytes)));
  im.scratch_bytes = bytes;
  return Ok{};
}

Status CudaBackend::prepare(const graph::ComputeGraph& graph) {
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  return grow_scratch(scratch_bytes(graph, id_));
}

void CudaBackend::release(uint64_t uid) {
  (void)cudaSetDevice(device_);
  for (void* exec : captures_.release(uid))
    (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (impl_->names_uid == uid) impl_->names_uid = 0;
}

Status CudaBackend::launch_nodes(const graph::ComputeGraph& graph,
                                 std::span<const NodeId> /*nodes*/) {
  for (const Pending& p : impl_->pending) {
    const int e = p.fn(p.launch);
    if (e != 0) {
      const Node& n = graph.node(p.launch.node_id);
      return cuda_status(static_cast<cudaError_t>(e),
                         fmt::format("{}: node {} '{}' (op {})", name_, p.launch.node_id, n.name,
                                     graph::op_name(n.op)));
    }
  }
  return Ok{};
}

Status CudaBackend::execute(const graph::ComputeGraph& g, std::span<const NodeId> nodes,
                            const NodeData& data) {
  Impl& im = *impl_;
  if (nodes.empty()) return Ok{};
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  im.pending.clear();
  im.addresses.clear();
  uint64_t need = 0;
  std::array<DType, graph::kMaxSrc> dts{};
  for (NodeId id : nodes) {
    const Node& n = g.node(id);
    if (n.is_leaf() || n.op == Op::kReshape || n.op == Op::kView) continue;
    Pending p;
    NodeLaunch& l = p.launch;
    l.node_id = id;
    l.op = n.op;
    l.params = n.params;
    l.n_src = n.n_src;
    l.dst = TensorRef{.data = data[id], .dtype = n.dtype, .ne = n.shape.ne};
    l.dst_bytes = graph::tensor_bytes(n.dtype, n.shape);
    im.addresses.push_back(reinterpret_cast<uint64_t>(data[id]));
    for (int k = 0; k < n.n_src; ++k) {
      const Node& s = g.node(n.src[k]);
      dts[static_cast<size_t>(k)] = s.dtype;
      l.src[static_cast<size_t>(k)] =
          TensorRef{.data = data[n.src[k]], .dtype = s.dtype, .ne = s.shape.ne};
      im.addresses.push_back(reinterpret_cast<uint64_t>(data[n.src[k]]));
    }
    const std::span<const DType> src_dts(dts.data(), static_cast<size_t>(n.n_src));
    p.fn = find_launcher(n.op, key_dtype(n, src_dts));
    if (p.fn == nullptr || !cuda_supports(n, src_dts)) {
      return make_error(fmt::format("{}: no kernel for node {} '{}' (op {}, {})", name_, id, n.name,
                                    graph::op_name(n.op), dtype_name(key_dtype(n, src_dts))));
    }
    if (n.op == Op::kGetRows || n.op == Op::kMulMat) {
      const Node& s = g.node(n.src[0]);
      l.src[0].row_bytes = graph::tensor_bytes(s.dtype, graph::Shape{s.shape.ne[0]});
    }
    need = std::max(need, node_scratch_bytes(g, id));
    l.err = im.err_dev;
    l.stream = im.stream;
    im.pending.push_back(p);
  }
  if (g.uid() != im.names_uid) {  // names for device errors found later (check_device_errors)
    im.names.clear();
    for (const Node& n : g.nodes()) im.names.push_back(n.name);
    im.names_uid = g.uid();
  }
  MINFER_TRY_STATUS(grow_scratch(need));
  for (Pending& p : im.pending) {
    p.launch.scratch = im.scratch;
    p.launch.scratch_bytes = im.scratch_bytes;
  }
  im.addresses.push_back(reinterpret_cast<uint64_t>(im.scratch));
  const CaptureKey key{
      .uid = g.uid(), .first_node = nodes.front(), .n_nodes = static_cast<int32_t>(nodes.size())};
  const CaptureCache::Decision d = captures_.on_execute(key, fingerprint_addresses(im.addresses));
  if (d.stale != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(d.stale));
  switch (d.action) {
    case CaptureCache::Action::kDirect:
      return launch_nodes(g, nodes);
    case CaptureCache::Action::kReplay:
      return cuda_status(
          cudaGraphLaunch(static_cast<cudaGraphExec_t>(captures_.find(key)), im.stream),
          fmt::format("{}: replay of graph {}", name_, g.uid()));
    case CaptureCache::Action::kCapture:
      break;
  }
  MINFER_TRY_STATUS(cuda_status(cudaStreamBeginCapture(im.stream, cudaStreamCaptureModeThreadLocal),
                                "cudaStreamBeginCapture"));
  const Status launched = launch_nodes(g, nodes);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(im.stream, &graph);
  if (!launched.ok()) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return launched;
  }
  MINFER_TRY_STATUS(cuda_status(ended, "cudaStreamEndCapture"));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  MINFER_TRY_STATUS(cuda_status(inst, fmt::format("{}: instantiating graph {}", name_, g.uid())));
  captures_.store(key, fingerprint_addresses(im.addresses), exec);
  return cuda_status(cudaGraphLaunch(exec, im.stream),
                     fmt::format("{}: launch of graph {}", name_, g.uid()));
}

Status CudaBackend::check_device_errors() {
  Impl& im = *impl_;
  if (!im.sticky.ok()) {
    Status s = im.sticky;
    im.sticky = Ok{};
    return s;
  }
  volatile int32_t* w = im.err_host;
  if (w[0] == 0) return Ok{};
  const int32_t node = w[0] - 1, code = w[1], value = w[2], row = w[3];
  for (int i = 0; i < 4; ++i) w[i] = 0;
  const std::string name = node >= 0 && static_cast<size_t>(node) < im.names.size()
                               ? im.names[static_cast<size_t>(node)]
                               : std::string("?");
  return make_error(fmt::format("{}: node {} '{}': {} (value {} at row {})", name_, node, name,
                                device_error_name(code), value, row));
}

Status CudaBackend::synchronize() {
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  MINFER_TRY_STATUS(cuda_status(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize"));
  return check_device_errors();
}

Result<void*> CudaBackend::alloc_buffer(uint64_t bytes, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 256) {
    return make_error(
        fmt::format("{}: alignment {} (cudaMalloc gives 256-byte alignment)", name_, alignment));
  }
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<uint64_t>(bytes, alignment));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    return make_error(fmt::format("{}: cudaMalloc of {} bytes failed: {} ({} of {} bytes free)",
                                  name_, bytes, cudaGetErrorString(e), free_b, total_b));
  }
  return p;
}

void CudaBackend::free_buffer(void* ptr, uint64_t /*bytes*/) noexcept {
  (void)cudaSetDevice(device_);
  (void)cudaFree(ptr);  // cudaFree waits for the device work using it
}

Status CudaBackend::set(void* dst, const void* host_src, uint64_t bytes) {
  if (bytes == 0) return Ok{};
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  // From pageable memory the call returns once the source is staged: reusable at once.
  return cuda_status(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, impl_->stream),
                     fmt::format("{}: set of {} bytes", name_, bytes));
}

Status CudaBackend::get(void* host_dst, const void* src, uint64_t bytes) {
  MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  if (bytes > 0) {
    MINFER_TRY_STATUS(
        cuda_status(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream),
                    fmt::format("{}: get of {} bytes", name_, bytes)));
  }
  MINFER_TRY_STATUS(cuda_status(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize"));
  return check_device_errors();
}

uint64_t CudaBackend::record_fence() {
  const FenceRing::Record r = fences_.record();
  (void)cudaSetDevice(device_);
  const cudaError_t e = cudaEventRecord(impl_->events[r.slot], impl_->stream);
  if (e != cudaSuccess && impl_->sticky.ok()) impl_->sticky = cuda_status(e, "cudaEventRecord");
  return r.token;
}

Status CudaBackend::wait_fence(uint64_t token) {
  MINFER_TRY(std::optional<uint32_t> slot, fences_.wait_slot(token));
  if (slot.has_value()) {
    MINFER_TRY_STATUS(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    MINFER_TRY_STATUS(
        cuda_status(cudaEventSynchronize(impl_->events[*slot]), "cudaEventSynchronize"));
  }
  return check_device_errors();
}

void add_cuda_devices(Registry& registry) {
  Result<int> n = device_count();
  if (!n.ok()) return;
  for (int i = 0; i < *n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    DeviceInfo info{.name = fmt::format("cuda{}", i),
                    .description = fmt::format("{} (compute {}.{}, {} MiB)", p.name, p.major,
                                               p.minor, p.totalGlobalMem >> 20),
                    .host_memory = false,
                    .memory_bytes = static_cast<uint64_t>(p.totalGlobalMem)};
    (void)registry.add(DeviceFactory{
        .info = std::move(info),
        .create = [i](graph::BackendId id) -> Result<std::unique_ptr<Backend>> {
          MINFER_TRY(std::unique_ptr<CudaBackend> b,
                     CudaBackend::create(CudaBackendOptions{
                         .device = i, .id = id, .graphs = !Config::get().no_cuda_graphs}));
          return std::unique_ptr<Backend>(std::move(b));
        }});
  }
}

}  // namespace minfer::backend::cuda
