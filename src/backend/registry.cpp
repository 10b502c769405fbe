// Stage 11/12 seam (devices): the backend registry (see registry.h).
#include "backend/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#ifdef MINFER_CUDA
#include "backend/cuda/cuda_devices.h"
#endif

namespace minfer::backend {

Registry& Registry::global() {
  static Registry registry;
#ifdef MINFER_CUDA
  // The GPUs the CUDA runtime reports, once; none (no driver, no device) adds nothing
  // and prints nothing, so a CUDA build behaves as a CPU build on such a machine.
  static std::once_flag cuda_once;
  std::call_once(cuda_once, [] { cuda::add_cuda_devices(registry); });
#endif
  return registry;
}

Status Registry::add(DeviceFactory factory) {
  const std::string& name = factory.info.name;
  if (name.empty()) return make_error("device registry: a device needs a name");
  if (name == "cpu") return make_error("device registry: 'cpu' is built in");
  if (!factory.create) return make_error(fmt::format("device registry: '{}' has no factory", name));
  std::lock_guard lock(mu_);
  for (const DeviceFactory& f : factories_) {
    if (f.info.name == name) {
      return make_error(fmt::format("device registry: '{}' is registered already", name));
    }
  }
  factories_.push_back(std::move(factory));
  return Ok{};
}

void Registry::remove(std::string_view name) {
  std::lock_guard lock(mu_);
  std::erase_if(factories_, [&](const DeviceFactory& f) { return f.info.name == name; });
}

std::vector<DeviceInfo> Registry::devices() const {
  std::lock_guard lock(mu_);
  std::vector<DeviceInfo> out;
  out.reserve(factories_.size());
  for (const DeviceFactory& f : factories_) out.push_back(f.info);
  return out;
}

Result<std::unique_ptr<Backend>> Registry::create(std::string_view name,
                                                  graph::BackendId id) const {
  std::function<Result<std::unique_ptr<Backend>>(graph::BackendId)> make;
  std::string names = "cpu";
  {
    std::lock_guard lock(mu_);
    for (const DeviceFactory& f : factories_) {
      names += ", " + f.info.name;
      if (f.info.name == name) make = f.create;
    }
  }
  if (!make) return make_error(fmt::format("unknown device '{}' (available: {})", name, names));
  MINFER_TRY(std::unique_ptr<Backend> b, make(id));
  if (b == nullptr || b->id() != id) {
    return make_error(fmt::format("device '{}': its factory returned no backend with id {}", name,
                                  static_cast<int>(id)));
  }
  return b;
}

}  // namespace minfer::backend
