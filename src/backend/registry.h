// Stage 11/12 seam (devices): the backend registry — the devices a context may run on
// besides the CPU, each with a factory. The engine asks it for the backends a context
// names (EngineOptions::devices, `--device`); `minfer --list-devices` prints it.
// Invariants: "cpu" is never registered (every context has the CPU backend, built by
// the engine with its numerics); names are unique; a factory is called once per
// context that names its device and hands that context the backend it owns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"

namespace minfer::backend {

struct DeviceInfo {
  std::string name;           // "cpu", "cuda0": what --device takes
  std::string description;    // one line for --list-devices
  bool host_memory = true;    // the host may read its buffers through a pointer
  uint64_t memory_bytes = 0;  // the device's own memory (0: the host's, or unknown)
};

struct DeviceFactory {
  DeviceInfo info;
  // Builds the backend with the node placement id the context gives it (> the CPU's).
  std::function<Result<std::unique_ptr<Backend>>(graph::BackendId id)> create;
};

class Registry {
 public:
  // The process-wide registry a build's device backends add themselves to.
  static Registry& global();

  // Error: the name is empty, "cpu", or registered already.
  Status add(DeviceFactory factory);
  // Drops a device (a test's, at its end); unknown names are ignored.
  void remove(std::string_view name);
  // The registered devices in registration order (the CPU is not among them).
  std::vector<DeviceInfo> devices() const;
  // Builds `name`'s backend. Error: no such device (the message lists the names).
  Result<std::unique_ptr<Backend>> create(std::string_view name, graph::BackendId id) const;

 private:
  mutable std::mutex mu_;
  std::vector<DeviceFactory> factories_;
};

}  // namespace minfer::backend
