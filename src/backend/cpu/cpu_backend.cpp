// Stage 12 (kernels): CpuBackend — ISA chosen once, the worker pool, and the op
// dispatch. Invariant: supports_op is exactly the set of (op, dtypes) with a kernel
// below; execute never substitutes one kernel for another.
#include "backend/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "backend/cpu/attn_ggml_f16.h"
#include "backend/cpu/geglu.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/pool.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {

using graph::Node;
using graph::NodeId;
using graph::Op;

std::string_view isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto:
      return "auto";
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

Result<CpuIsa> isa_from_name(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kAuto, CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == isa_name(isa)) return isa;
  }
  return make_error(
      fmt::format("unknown CPU ISA '{}' (expected auto, scalar, avx2 or avx512)", name));
}

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c"
// (GCC's has), and the sanitizer build uses clang.
static bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

CpuIsa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
      return CpuIsa::kAvx512;
    }
    return CpuIsa::kAvx2;
  }
#endif
  return CpuIsa::kScalar;
}

IsaKernels scalar_kernels() {
  return IsaKernels{.dot_kernel = scalar_dot_kernel,
                    .dot_f32 = dot_f32_scalar,
                    .axpy_f32 = axpy_f32_scalar,
                    .attn_scores_f32 = attn_scores_f32_scalar,
                    .attn_axpy_rows_f32 = attn_axpy_rows_f32_scalar,
                    .f16_to_f32 = f16_to_f32_scalar,
                    .silu_poly = silu_poly_scalar,
                    .geglu = geglu_scalar};
}

IsaKernels llamacpp_kernels(bool repack, bool fa_f16_arith, bool avx2_build) {
  // The flash-attention f16 helpers: llama.cpp's f16-arithmetic form (the AVX512-FP16
  // twins, or, on a CPU without it, nullptr: ops_attention.cpp's scalar references of
  // that form), else its f32-arithmetic form (AVX2 twins).
  const bool fp16 = fa_f16_arith && cpu_has_avx512fp16();
  if (avx2_build) {
    // llama.cpp built without AVX-512: its 8-lane ggml_vec_dot_f16 (the flash attention's
    // Q·K), its AVX2 expf (silu, the tiled flash attention's softmax) over 8-lane bodies,
    // its 8-lane F32 / F16 matmul orders and LayerNorm variance sums.
    IsaKernels k = llamacpp_kernels(repack, fa_f16_arith, false);
    k.dot_kernel = llamacpp_avx2_build_dot_kernel;  // its 8-lane F32 / F16 GEMV and sgemm
    k.ggml_norm_lanes8 = true;
    k.silu_poly = silu_poly8_avx2;
    k.silu_lanes = 8;
    k.ggml_fa_dot_f16 = ggml_dot_f16_vec8_avx2;
    k.ggml_fa_tiled_lanes8 = true;
    return k;
  }
  return IsaKernels{.dot_kernel = llamacpp_dot_kernel,
                    .repack_dot_kernel = repack ? llamacpp_repack_dot_kernel : nullptr,
                    .dot_f32 = dot_f32_avx2,
                    .axpy_f32 = axpy_f32_avx2,
                    .attn_scores_f32 = attn_scores_f32_avx2,
                    .attn_axpy_rows_f32 = attn_axpy_rows_f32_avx2,
                    .attn_exp_f32 = attn_exp_f32_avx2,
                    .f16_to_f32 = f16_to_f32_avx2,
                    .q8_0_to_f32 = q8_0_to_f32_avx2,
                    .q4_0_to_f32 = q4_0_to_f32_avx2,
                    .silu_poly = silu_poly_avx2,
                    .geglu = geglu_avx2,
                    .ggml_fa_dot_f16 = ggml_dot_f16_vec_avx2_fa,
                    .ggml_fa_mad_f16 = !fa_f16_arith ? ggml_mad_f16_f32arith_avx2
                                       : fp16        ? ggml_mad_f16_avx512fp16
                                                     : nullptr,
                    .ggml_fa_scale_f16 = !fa_f16_arith ? ggml_scale_f16_f32arith_avx2
                                         : fp16        ? ggml_scale_f16_avx512fp16
                                                       : nullptr,
                    .row_sums_f64 = row_sums_f64_avx2};
}

IsaKernels avx512_kernels() {
  return IsaKernels{.dot_kernel = avx512_or_avx2_dot_kernel,
                    .dot_f32 = dot_f32_avx2,
                    .axpy_f32 = axpy_f32_avx2,
                    .attn_scores_f32 = attn_scores_f32_avx512,
                    .attn_scores2_f32 = attn_scores2_f32_avx512,
                    .attn_axpy_rows_f32 = attn_axpy_rows_f32_avx512,
                    .attn_scores_f32_multi = attn_scores_f32_multi_avx512,
                    .attn_axpy_rows_f32_multi = attn_axpy_rows_f32_multi_avx512,
                    .attn_exp_f32 = attn_exp_f32_avx512,
                    .f16_to_f32 = f16_to_f32_avx2,
                    .q8_0_to_f32 = q8_0_to_f32_avx2,
                    .q4_0_to_f32 = q4_0_to_f32_avx2,
                    .silu_poly = silu_poly_avx2,
                    .geglu = geglu_avx2,
                    .row_sums_f64 = row_sums_f64_avx2};
}

IsaKernels avx2_kernels() {
  return IsaKernels{.dot_kernel = avx2_or_scalar_dot_kernel,
                    .dot_f32 = dot_f32_avx2,
                    .axpy_f32 = axpy_f32_avx2,
                    .attn_scores_f32 = attn_scores_f32_avx2,
                    .attn_axpy_rows_f32 = attn_axpy_rows_f32_avx2,
                    .attn_exp_f32 = attn_exp_f32_avx2,
                    .f16_to_f32 = f16_to_f32_avx2,
                    .q8_0_to_f32 = q8_0_to_f32_avx2,
                    .q4_0_to_f32 = q4_0_to_f32_avx2,
                    .silu_poly = silu_poly_avx2,
                    .geglu = geglu_avx2,
                    .row_sums_f64 = row_sums_f64_avx2};
}

// The element types a KV region may hold here (kv::kv_dtype's list).
static bool kv_cell_type(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kQ8_0 || d == DType::kQ4_0;
}

bool cpu_supports(const Node& n, std::span<const DType> dts) {
  if (static_cast<int>(dts.size()) != n.n_src) return false;
  auto all_f32 = [&] {
    for (DType d : dts) {
      if (d != DType::kF32) return false;
    }
    return n.dtype == DType::kF32;
  };
  switch (n.op) {
    case Op::kRmsNorm:
    case Op::kRmsNormMul:
    case Op::kMul:
    case Op::kAdd:
    case Op::kSilu:
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kTanh:
    case Op::kGelu:
    case Op::kNorm:
    case Op::kSoftmax:
    case Op::kScale:
    case Op::kHadamard:
      return all_f32();
    case Op::kGetRows:
      return dts.size() == 2 && quant::traits(dts[0]) != nullptr && dts[1] == DType::kI32 &&
             dts[0] != DType::kQ8_K;
    case Op::kMulMat:
      return dts.size() == 2 && scalar_dot_kernel(dts[0]).vec_dot != nullptr &&
             dts[1] == DType::kF32;
    case Op::kRope:
      return dts.size() == 2 && dts[0] == DType::kF32 && dts[1] == DType::kI32;
    case Op::kTopK:
      return dts.size() == 1 && dts[0] == DType::kF32 && n.dtype == DType::kI32;
    case Op::kMoeWeights:
      return dts.size() == 2 && dts[0] == DType::kF32 && dts[1] == DType::kI32;
    case Op::kMoeSum:
      return all_f32();
    case Op::kMulMatId:
      return dts.size() == 3 && scalar_dot_kernel(dts[0]).vec_dot != nullptr &&
             dts[1] == DType::kF32 && dts[2] == DType::kI32;
    case Op::kKvStore:
      return dts.size() == 3 && kv_cell_type(dts[0]) && dts[1] == DType::kF32 &&
             dts[2] == DType::kI32;
    case Op::kAttention:
      return dts.size() == 4 && dts[0] == DType::kF32 && kv_cell_type(dts[1]) &&
             kv_cell_type(dts[2]) && dts[3] == DType::kI32;
    case Op::kCont:
    case Op::kReshape:
    case Op::kView:
      return true;
    default:
      return false;  // leaves and unknown ops have no kernel
  }
}

struct CpuBackend::Impl {
  CpuIsa isa;
  graph::BackendId id;
  IsaKernels kernels;
  ThreadPool pool;
  Scratch scratch;
  std::string dump_dir;  // MINFER_GRAPH_DUMP ("" = off)
  uint64_t dump_seq = 0;
  Impl(CpuIsa i, graph::BackendId b, int32_t n_threads, bool llamacpp, bool repack,
       bool fa_f16_arith, bool avx2_build)
      : isa(i),
        id(b),
        kernels(llamacpp               ? llamacpp_kernels(repack, fa_f16_arith, avx2_build)
                : i == CpuIsa::kAvx512 ? avx512_kernels()
                : i == CpuIsa::kAvx2   ? avx2_kernels()
                                       : scalar_kernels()),
        pool(n_threads) {}
};

namespace {

// MINFER_GRAPH_DUMP: every computed F32 node's output as raw little-endian f32, one file
// per node and execute, named <seq>_<name>.f32 (names carry the layer, "Qcur-3"); a
// debugging aid for comparing intermediates with another engine
// (tools/reference/compare_intermediates.py); off unless the variable names a directory.
void dump_node(const std::string& dir, uint64_t seq, const Node& n, const NodeData& data,
               NodeId id) {
  if (n.dtype != DType::kF32 || n.name.empty()) return;
  const std::string path = fmt::format("{}/{:06d}_{}.f32", dir, seq, n.name);
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data.as<const float>(id), sizeof(float), static_cast<size_t>(n.shape.n_elements()),
                f);
    std::fclose(f);
  }
}

}  // namespace

Result<std::unique_ptr<CpuBackend>> CpuBackend::create(const CpuBackendOptions& o) {
  const CpuIsa best = detect_isa();
  CpuIsa isa = o.isa == CpuIsa::kAuto ? best : o.isa;
  if (isa == CpuIsa::kAvx2 && best == CpuIsa::kScalar) {
    return make_error("cpu backend: AVX2 kernels requested but this CPU lacks AVX2/FMA/F16C");
  }
  if (isa == CpuIsa::kAvx512 && best != CpuIsa::kAvx512) {
    return make_error(
        "cpu backend: AVX-512 kernels requested but this CPU lacks AVX512F/BW/VL/VNNI");
  }
  int32_t n_threads = o.n_threads;
  if (n_threads < 0) return make_error(fmt::format("cpu backend: n_threads {} < 0", n_threads));
  if (n_threads == 0)
    n_threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.llamacpp_numerics && isa != CpuIsa::kAvx2) {
    return make_error("cpu backend: llama.cpp numerics run on the AVX2 kernels only");
  }
  if (o.llamacpp_avx2_build && !o.llamacpp_numerics) {
    return make_error("cpu backend: llamacpp_avx2_build is a form of llama.cpp numerics");
  }
  auto impl = std::make_unique<Impl>(isa, o.id, n_threads, o.llamacpp_numerics, o.llamacpp_repack,
                                     o.llamacpp_fa_f16_arith, o.llamacpp_avx2_build);
  impl->dump_dir = o.dump_dir;
  return std::unique_ptr<CpuBackend>(new CpuBackend(std::move(impl)));
}

CpuBackend::CpuBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuBackend::~CpuBackend() = default;

graph::BackendId CpuBackend::id() const {
  return impl_->id;
}
CpuIsa CpuBackend::isa() const {
  return impl_->isa;
}
int32_t CpuBackend::n_threads() const {
  return impl_->pool.n_threads();
}

bool CpuBackend::supports_op(const Node& node, std::span<const DType> src_dtypes) const {
  return cpu_supports(node, src_dtypes);
}

Status CpuBackend::execute(const graph::ComputeGraph& g, std::span<const NodeId> nodes,
                           const NodeData& data) {
  const OpCtx c{.graph = g,
                .data = data,
                .pool = impl_->pool,
                .k = impl_->kernels,
                .scratch = impl_->scratch};
  for (NodeId id : nodes) {
    const Node& n = g.node(id);
    Status st = Ok{};
    switch (n.op) {
      case Op::kInput:
      case Op::kWeight:
      case Op::kKvRegion:
      case Op::kReshape:
      case Op::kView:
        continue;  // leaves hold data; aliases share their source's bytes
      case Op::kAdd:
      case Op::kMul:
      case Op::kScale:
      case Op::kSilu:
      case Op::kSwiglu:
      case Op::kGeglu:
      case Op::kTanh:
      case Op::kGelu:
      case Op::kCont:
        st = op_elementwise(c, id);
        break;
      case Op::kRmsNorm:
      case Op::kRmsNormMul:
      case Op::kNorm:
      case Op::kSoftmax:
        st = op_norm(c, id);
        break;
      case Op::kGetRows:
        st = op_get_rows(c, id);
        break;
      case Op::kKvStore:
        st = op_kv_store(c, id);
        break;
      case Op::kRope:
        st = op_rope(c, id);
        break;
      case Op::kAttention:
        st = op_attention(c, id);
        break;
      case Op::kMulMat:
        st = op_mul_mat(c, id);
        break;
      case Op::kMulMatId:
        st = op_mul_mat_id(c, id);
        break;
      case Op::kHadamard:
        st = op_hadamard(c, id);
        break;
      case Op::kTopK:
      case Op::kMoeWeights:
      case Op::kMoeSum:
        st = op_moe(c, id);
        break;
      default:
        return make_error(fmt::format("cpu backend: no kernel for node {} '{}' (op {})", id, n.name,
                                      graph::op_name(n.op)));
    }
    if (!st.ok()) return st.error().context(fmt::format("cpu backend, node {}", id));
    if (!impl_->dump_dir.empty()) dump_node(impl_->dump_dir, impl_->dump_seq++, n, data, id);
  }
  return Ok{};
}

}  // namespace minfer::backend::cpu
