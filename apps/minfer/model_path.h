// Stage 18 (CLI): where a model argument points. A path that exists is taken as is;
// otherwise the name is looked up in the model cache ($MINFER_MODEL_DIR, else
// $MINFER_CACHE/models, else ~/.cache/minfer/models). No argument → the default model.
// `hf:REPO[:QUANT]` is downloaded into the cache first (model_fetch.h).
#pragma once

#include <string>

#include "core/result.h"

namespace minfer::cli {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string model_cache_dir();
Result<std::string> resolve_model_path(const std::string& arg);  // "" → default model

}  // namespace minfer::cli
