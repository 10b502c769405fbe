// Stage 1 (core): Config — every MINFER_* behaviour knob, read from the environment
// once per process. Invariant: nothing else in the engine calls getenv for a knob;
// the decode loop reads plain bools (docs/USAGE.md lists every variable).
#pragma once

#include <string>

namespace minfer {

struct Config {
  bool timing = false;         // MINFER_TIMING: per-token sampling vs forward split
  bool op_timing = false;      // MINFER_OP_TIMING: per-op time of the decode steps (CLI runs)
  bool graph_trace = false;    // MINFER_GRAPH_TRACE: split layout + op census per execute
  bool rebuild_trace = false;  // MINFER_REBUILD_TRACE: one line per graph rebuild
  std::string cpu_isa;         // MINFER_CPU_ISA: "" (best the CPU runs), scalar, avx2, avx512
  std::string cache_type;      // MINFER_CACHE_TYPE: "" (f32), f32, f16 (--cache-type wins)
  std::string graph_dump;      // MINFER_GRAPH_DUMP: directory for per-node f32 dumps ("" off)
  std::string numerics;        // MINFER_NUMERICS: "" (default), default, llamacpp (flag wins)
  // MINFER_LLAMACPP_TILED_ATTN: on unless "0" — under --numerics llamacpp, batches of
  // >= 64 query rows take llama.cpp's tiled flash attention (docs/USAGE.md).
  bool llamacpp_tiled_attn = true;
  // MINFER_KV_ROTATION: on unless "0" — llama.cpp's Walsh-Hadamard rotation of Q/K/V for
  // a quantized KV cache, in every numerics mode (graph::CParams::kv_rotation).
  bool kv_rotation = true;
  // MINFER_NO_CUDA_GRAPHS: a CUDA build launches its kernels directly instead of capturing
  // each graph's decode step as a CUDA graph and replaying it.
  bool no_cuda_graphs = false;
  // MINFER_TEST_LOAD_DELAY_MS: `minfer serve` waits this long (listening, answering 503)
  // before it loads the model, so a test can see the loading state; 0 (unset) in use.
  int test_load_delay_ms = 0;

  // Reads the variables now (a flag is on when set to anything but "", "0").
  static Config from_env();
  // The process-wide Config, read from the environment on first use.
  static const Config& get();
};

}  // namespace minfer
