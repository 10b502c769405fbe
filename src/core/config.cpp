// Stage 1 (core): Config from the environment, read once.
#include "core/config.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace minfer {
namespace {

bool flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace

Config Config::from_env() {
  Config c;
  c.timing = flag("MINFER_TIMING");
  c.op_timing = flag("MINFER_OP_TIMING");
  c.graph_trace = flag("MINFER_GRAPH_TRACE");
  c.no_cuda_graphs = flag("MINFER_NO_CUDA_GRAPHS");
  c.rebuild_trace = flag("MINFER_REBUILD_TRACE");
  if (const char* isa = std::getenv("MINFER_CPU_ISA"); isa != nullptr) c.cpu_isa = isa;
  if (const char* t = std::getenv("MINFER_CACHE_TYPE"); t != nullptr) c.cache_type = t;
  if (const char* d = std::getenv("MINFER_GRAPH_DUMP"); d != nullptr) c.graph_dump = d;
  if (const char* m = std::getenv("MINFER_NUMERICS"); m != nullptr) c.numerics = m;
  if (const char* r = std::getenv("MINFER_KV_ROTATION"); r != nullptr) {
    c.kv_rotation = std::strcmp(r, "0") != 0;
  }
  if (const char* a = std::getenv("MINFER_LLAMACPP_TILED_ATTN"); a != nullptr) {
    c.llamacpp_tiled_attn = std::strcmp(a, "0") != 0;
  }
  if (const char* ms = std::getenv("MINFER_TEST_LOAD_DELAY_MS"); ms != nullptr) {
    c.test_load_delay_ms = std::max(0, std::atoi(ms));
  }
  return c;
}

const Config& Config::get() {
  static const Config config = from_env();
  return config;
}

}  // namespace minfer
