// Stage 6 (weights + topology): a loaded model — hyperparameters, bound weights and
// the architecture's graph builder.
// Invariants: build_graph is a pure function of GraphParams (equal params ⇒
// structurally identical graphs: the graph-reuse contract, ARCHITECTURE §2.1); token
// ids, positions, KV cells and windows are inputs filled per step, never topology;
// weights are views into the gguf::Model's mmap, which must outlive the Model.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "gguf/gguf.h"
#include "graph/graph.h"
#include "graph/params.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace minfer::model {

// One architecture: how to finish the hparams, bind the weights and build the graph.
// Each lives in src/model/arch/<name>/ and registers itself in model.cpp's table.
struct Arch {
  std::string_view name;  // general.architecture
  // arch-specific hparams (rope mode, sliding window, checks); may read more keys
  Status (*adjust)(const gguf::Model& file, HParams& hp);
  Result<ModelWeights> (*bind)(const WeightBinder& binder, const HParams& hp);
  // Unfused, unplaced graph; MINFER_CHECKs params already checked by check_params.
  graph::ComputeGraph (*build)(const HParams& hp, const ModelWeights& w,
                               const graph::GraphParams& p);
};

const Arch* find_arch(std::string_view name);
std::vector<std::string_view> arch_names();

class Model {
 public:
  // Reads hparams, binds and shape-checks every tensor. Errors: unknown architecture
  // (named, with the supported list), missing metadata key, missing tensor, wrong
  // shape or type, unsupported rope scaling.
  static Result<std::unique_ptr<Model>> load(const gguf::Model& file);

  const HParams& hparams() const { return hp_; }
  const ModelWeights& weights() const { return weights_; }
  std::string_view arch() const { return arch_->name; }

  // Errors for params this model cannot build (graph::validate plus: only the f32 KV
  // format is implemented).
  Status check_params(const graph::GraphParams& p) const;
  // The forward graph for `p` (check_params first: a bad p here is a broken invariant).
  graph::ComputeGraph build_graph(const graph::GraphParams& p) const;

 private:
  Model() = default;
  const Arch* arch_ = nullptr;
  HParams hp_;
  ModelWeights weights_;
};

}  // namespace minfer::model
