// Stage 6 (weights + topology): architecture table, model loading, graph entry point.
#include "model/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "core/dtype.h"
#include "kv/cells.h"
#include "model/arch/bert/bert.h"
#include "model/arch/gemma3/gemma3.h"
#include "model/arch/llama/llama.h"
#include "model/arch/phi3/phi3.h"
#include "model/arch/qwen2/qwen2.h"
#include "model/arch/qwen3/qwen3.h"
#include "model/arch/qwen3moe/qwen3moe.h"

namespace minfer::model {
namespace {

const Arch kArchs[] = {
    llama::kArch,  qwen2::kArch, qwen3::kArch, qwen3moe::kArch,
    gemma3::kArch, phi3::kArch,  bert::kArch,
};

}  // namespace

const Arch* find_arch(std::string_view name) {
  for (const Arch& a : kArchs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::vector<std::string_view> arch_names() {
  std::vector<std::string_view> out;
  for (const Arch& a : kArchs) out.push_back(a.name);
  return out;
}

Result<std::unique_ptr<Model>> Model::load(const gguf::Model& file) {
  MINFER_TRY(std::string arch_name, file.get_string("general.architecture"));
  const Arch* arch = find_arch(arch_name);
  if (arch == nullptr) {
    return make_error(fmt::format("unknown architecture '{}' (supported: {})", arch_name,
                                  fmt::join(arch_names(), ", ")));
  }
  uint32_t n_vocab_fallback = 0;
  if (const gguf::TensorInfo* t = file.find_tensor("token_embd.weight");
      t != nullptr && t->dims.size() >= 2) {
    n_vocab_fallback = static_cast<uint32_t>(t->dims[1]);
  }
  auto m = std::unique_ptr<Model>(new Model());
  m->arch_ = arch;
  MINFER_TRY(m->hp_, read_hparams(file, n_vocab_fallback));
  MINFER_TRY_STATUS(arch->adjust(file, m->hp_));
  MINFER_TRY(m->weights_, arch->bind(WeightBinder(file), m->hp_));
  return m;
}

Status Model::check_params(const graph::GraphParams& p) const {
  MINFER_TRY_STATUS(graph::validate(p));
  // A quantized cache holds whole blocks per head (attention reads one head's slice).
  for (graph::KvFormat f : {p.cparams.kv_format.k, p.cparams.kv_format.v}) {
    MINFER_TRY(DType kv_type, kv::kv_dtype(f));
    const uint32_t block = dtype_info(kv_type).block_size;
    if (hp_.n_embd_head % block != 0) {
      return make_error(
          fmt::format("KV cache type {} needs a head size that is a multiple of {}; "
                      "this model's is {}",
                      graph::kv_format_name(f), block, hp_.n_embd_head));
    }
  }
  return Ok{};
}

graph::ComputeGraph Model::build_graph(const graph::GraphParams& p) const {
  Status st = check_params(p);
  MINFER_CHECK(st.ok(), "build_graph(%s): %s", graph::to_string(p).c_str(),
               st.ok() ? "" : st.error().message.c_str());
  return arch_->build(hp_, weights_, p);
}

}  // namespace minfer::model
