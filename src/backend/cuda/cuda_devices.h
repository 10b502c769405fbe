// Stage 11/12 seam (devices): the CUDA devices' entry point into the registry, called
// once from Registry::global() in a build with -DMINFER_CUDA=ON. Plain C++.
#pragma once

namespace minfer::backend {
class Registry;
}

namespace minfer::backend::cuda {

// Adds one device "cuda<i>" per GPU the CUDA runtime reports. Without a driver or a GPU
// it adds nothing and prints nothing (the build then behaves as a CPU build).
void add_cuda_devices(Registry& registry);

}  // namespace minfer::backend::cuda
