#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU (no network needed):
#   1. configure and build minfer with -DMINFER_CUDA=ON for the GPU found
#      (nvidia-smi --query-gpu=compute_cap), into build/cuda-check;
#   2. run the CUDA tests: ctest -L cuda (the kernels against the CPU, a whole model
#      with every layer on the GPU, graph replay against direct launches);
#   3. with a llama.cpp source tree (default: the one vendored by the llama-cpp-python
#      sdist, ~/.cache/minfer/ref/llama_cpp_python-0.3.36/vendor/llama.cpp) and models
#      given: build llama-bench with -DGGML_CUDA=ON (cached in ~/.cache/minfer/cuda-check)
#      and print llama-bench against `minfer bench --device cuda0 -ngl 99` (pp512, tg128).
# Usage: bash scripts/cuda-check.sh [--llama-cpp DIR] [--skip-llama] [MODEL.gguf ...]
# Needs the packages scripts/setup.sh installs and the CUDA toolkit (nvcc). Aims at under
# 10 minutes on an H100 with a warm llama.cpp build; the first llama.cpp CUDA build takes
# most of that. Exit status: 0 all passed, 1 a build or a test failed, 2 no GPU / no nvcc.
set -euo pipefail
cd "$(dirname "$0")/.."

llama_dir="${HOME}/.cache/minfer/ref/llama_cpp_python-0.3.36/vendor/llama.cpp"
skip_llama=0
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-cpp) llama_dir="$2"; shift 2 ;;
    --skip-llama) skip_llama=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) models+=("$1"); shift ;;
  esac
done

start=$SECONDS
phase() { echo "== cuda-check: $1 (at $((SECONDS - start))s)" >&2; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "cuda-check: no NVIDIA GPU found (nvidia-smi is not installed); nothing to check" >&2
  exit 2
fi
cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)"
if [ -z "$cap" ]; then
  echo "cuda-check: no NVIDIA GPU found (nvidia-smi lists none)" >&2
  exit 2
fi
if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  else
    echo "cuda-check: a GPU (compute capability $cap) but no nvcc: install the CUDA toolkit" >&2
    exit 2
  fi
fi
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)"
jobs="$(nproc)"
echo "cuda-check: $gpu, sm_$cap, $jobs jobs" >&2
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"

# 1. minfer. -Werror off: another host compiler may warn where the ci preset's does not.
phase "configure"
build=build/cuda-check
cmake --preset ci -B "$build" -DMINFER_CUDA=ON -DMINFER_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$cap" >/dev/null
phase "build"
cmake --build "$build" -j"$jobs" --target minfer backend_cuda_plan_test backend_cuda_test
"$build/apps/minfer/minfer" --list-devices

# 2. the CUDA tests
phase "ctest -L cuda"
status=0
ctest --test-dir "$build" -L cuda --output-on-failure -j1 || status=1

# 3. llama.cpp side by side
if [ "$skip_llama" = 1 ] || [ ${#models[@]} -eq 0 ]; then
  echo "cuda-check: no models given (or --skip-llama): no llama-bench comparison" >&2
elif [ ! -f "$llama_dir/CMakeLists.txt" ]; then
  echo "cuda-check: no llama.cpp source tree at $llama_dir (--llama-cpp DIR): no comparison" >&2
else
  phase "llama.cpp build (GGML_CUDA=ON)"
  lb="${HOME}/.cache/minfer/cuda-check/llama-build-sm$cap"
  cmake -S "$llama_dir" -B "$lb" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$cap" -DGGML_NATIVE=ON -DLLAMA_CURL=OFF >/dev/null
  cmake --build "$lb" -j"$jobs" --target llama-bench
  out="$build/bench"
  mkdir -p "$out"
  for m in "${models[@]}"; do
    name="$(basename "$m" .gguf)"
    phase "bench $name"
    "$lb/bin/llama-bench" -m "$m" -p 512 -n 128 -ngl 99 -o json >"$out/$name.llama.json" || status=1
    "$build/apps/minfer/minfer" bench "$m" -p 512 -n 128 --device cuda0 -ngl 99 -o json \
      >"$out/$name.minfer.json" || status=1
  done
  phase "table"
  python3 - "$out" "${models[@]}" <<'PY'
import json, os, sys
out, models = sys.argv[1], sys.argv[2:]
def rates(path):
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        return {}
    r = {}
    for o in rows:
        test = f"pp{o['n_prompt']}" if o.get("n_gen", 0) == 0 else f"tg{o['n_gen']}"
        r[test] = float(o["avg_ts"])
    return r
print(f"| model | test | minfer t/s | llama.cpp t/s | minfer / llama.cpp |")
print(f"|---|---|---:|---:|---:|")
for m in models:
    name = os.path.basename(m)[: -len(".gguf")] if m.endswith(".gguf") else os.path.basename(m)
    a = rates(os.path.join(out, name + ".minfer.json"))
    b = rates(os.path.join(out, name + ".llama.json"))
    for test in ("pp512", "tg128"):
        x, y = a.get(test), b.get(test)
        ratio = f"{x / y:.2f}" if x and y else "—"
        fx = f"{x:.1f}" if x else "failed"
        fy = f"{y:.1f}" if y else "failed"
        print(f"| {name} | {test} | {fx} | {fy} | {ratio} |")
PY
fi
phase "done"
exit "$status"
