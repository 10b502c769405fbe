#!/usr/bin/env bash
# Records the goldens of llama.cpp's *default* CPU configuration on an AVX2/AVX-512
# machine: the CPU_REPACK extra weight buffer on, so Q4_0 (and Q4_K) matmul weights with
# a row count divisible by 8 are repacked at load into 8-row interleaved blocks and
# multiplied by ggml's repack GEMV/GEMM (another float order than the plain kernels the
# goldens in tests/data/golden/<name>/ were recorded with; see their README).
#
# The library is a llama.cpp build with GGML_CPU_REPACK=ON (its default) and the AMX
# kernels off (GGML_NATIVE=OFF with the AVX/AVX2/AVX-512 flags on: the recording VM
# advertises AMX but faults on it), loaded through llama-cpp-python's ctypes bindings
# with LLAMA_CPP_LIB_PATH; `use_extra_bufts` stays at llama.cpp's default (true).
#   usage: tools/reference/make_repack_goldens.sh [NAME_FILTER]
#   env:   LLAMA_CPP_BUILD  the llama.cpp CMake build dir (default $MINFER_CACHE/ref/llama-bench-build;
#                           libllama.so and libggml*.so in its bin/)
#          LLAMA_CPP_PYTHON llama-cpp-python sources or install (default: the installed package, else
#                           $MINFER_CACHE/ref/llama_cpp_python-0.3.36, the version whose vendored
#                           llama.cpp the library was built from)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
BUILD="${LLAMA_CPP_BUILD:-$CACHE/ref/llama-bench-build}"
OUT="$ROOT/tests/data/golden/cpu-repack"
REF="$ROOT/tools/reference"
PY="${PYTHON:-python3}"
FILTER="${1:-.}"

[ -f "$BUILD/bin/libllama.so" ] || { echo "make_repack_goldens: no $BUILD/bin/libllama.so" >&2; exit 1; }
grep -q '^GGML_CPU_REPACK:BOOL=ON' "$BUILD/CMakeCache.txt" ||
  { echo "make_repack_goldens: $BUILD is not built with GGML_CPU_REPACK=ON" >&2; exit 1; }
if ! "$PY" -c 'import llama_cpp' 2>/dev/null; then
  export PYTHONPATH="${LLAMA_CPP_PYTHON:-$CACHE/ref/llama_cpp_python-0.3.36}${PYTHONPATH:+:$PYTHONPATH}"
fi
export LLAMA_CPP_LIB_PATH="$BUILD/bin"

# ggml-cpu's tiled K-quant matmul (GGML_CPU_TILED_MM, on by default) stays on: it is part
# of the default build (the Q4_K_M fixture's Q6_K layers go through it from 8 prompt rows).
run() {  # NAME MODEL PROMPTS [extra args]
  local name="$1" model="$2" prompts="$3"
  shift 3
  echo "$name" | grep -Eq -- "$FILTER" || return 0
  echo "make_repack_goldens: $name" >&2
  nice "$PY" "$REF/llamacpp_goldens.py" --model "$model" --prompts "$prompts" --out "$OUT/$name" \
    --threads 2 --n-predict 64 --top-k 10 --n-ctx 4096 --extra-bufts "$@"
  # the load log must show the repack buffer, or this is not the configuration it names
  grep -q 'CPU_REPACK' "$OUT/$name/golden.json" ||
    { echo "make_repack_goldens: $name: no CPU_REPACK buffer in llama.cpp's load log" >&2; exit 1; }
}
for name in qwen2.5-0.5b-q4_0 qwen2.5-0.5b-q4_k_m; do
  run "$name" "$CACHE/models/minfer-fixture-$name.gguf" "$REF/prompts/fixture_heldout.json" --fixture "$name"
done
# Gemma 3 270M (real weights, its Q4_K layers repacked): the 13 prompts of its plain golden.
run gemma-3-270m-q4_k_m "$CACHE/models/gemma-3-270m-q4_k_m.gguf" "$REF/prompts/gemma3.json"
