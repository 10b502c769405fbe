// Stage 12 (kernels): the CPU backend — an (op, dtype) → kernel table over a persistent
// worker pool, with a scalar reference for every kernel and AVX2 variants chosen once.
// Invariants (ARCHITECTURE §2.8): each output element has one reduction order whatever
// the thread count or batch size — threads split output rows / heads, never a dot
// product; activations are quantized per row; attention walks KV in chunks fixed by
// absolute cell position. The ISA is fixed at construction, so one backend never mixes
// scalar and SIMD results.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "core/result.h"

namespace minfer::backend::cpu {

// Kernel family. kAuto: the best the CPU supports (cpuid, once); an explicit ISA the
// CPU lacks is an Error at creation (never a silent downgrade).
enum class CpuIsa : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };
std::string_view isa_name(CpuIsa isa);
// "auto", "scalar", "avx2", "avx512" (isa_name's inverse); error names the bad value.
Result<CpuIsa> isa_from_name(std::string_view name);
// The best ISA this CPU runs: kAvx512 (F, BW, VL, VNNI + the AVX2 set), kAvx2 (with
// FMA and F16C), else kScalar.
CpuIsa detect_isa();

struct CpuBackendOptions {
  int32_t n_threads = 0;  // workers including the caller; 0: hardware concurrency
  CpuIsa isa = CpuIsa::kAuto;
  graph::BackendId id = graph::kBackendCpu;
  std::string dump_dir;  // per-node f32 dumps after each kernel (MINFER_GRAPH_DUMP); "" = off
  bool llamacpp_numerics = false;  // llama.cpp's accumulation orders (needs isa kAvx2)
  bool llamacpp_repack = true;     // ... with its CPU_REPACK weight buffer (its default)
  // ... with its flash attention's f16 helpers in f16 arithmetic (a native build on an
  // AVX512-FP16 CPU) instead of f32 arithmetic on widened halves (every other x86 build)
  bool llamacpp_fa_f16_arith = false;
  // ... as llama.cpp built without AVX-512 computes (GGML_AVX512* off, or a native build on
  // an AVX2-only CPU): its 8-lane f16 dot and AVX2 expf instead of its AVX-512 forms
  bool llamacpp_avx2_build = false;
};

class CpuBackend final : public Backend {
 public:
  static Result<std::unique_ptr<CpuBackend>> create(const CpuBackendOptions& options = {});
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  graph::BackendId id() const override;
  bool supports_op(const graph::Node& node, std::span<const DType> src_dtypes) const override;
  Status execute(const graph::ComputeGraph& graph, std::span<const graph::NodeId> nodes,
                 const NodeData& data) override;

  CpuIsa isa() const;  // resolved (never kAuto)
  int32_t n_threads() const;

 private:
  struct Impl;
  explicit CpuBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::backend::cpu
