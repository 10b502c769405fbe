#!/usr/bin/env bash
# Records tests/data/golden/cli-kvq/: llama-completion at its defaults (no
# LLAMA_ATTN_ROT_DISABLE, so with a q8_0/q4_0 K or V it rotates Q/K/V by its Walsh-Hadamard
# matrices), greedy, -c 1024 -t 2, with -ctk/-ctv, through tools/reference/parity_cli.py
# --record. `--numerics llamacpp` must print the same bytes (tests/golden/test_golden.py).
#   usage: tools/reference/make_kvq_goldens.sh [NAME_FILTER]
#   env:   LLAMA_CPP_BUILD  the llama.cpp CMake build (default $MINFER_CACHE/ref/llama-bench-build:
#                           llama.cpp of llama-cpp-python 0.3.36, GGML_NATIVE=ON on the AVX-512
#                           recording machine; bin/llama-completion)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
BUILD="${LLAMA_CPP_BUILD:-$CACHE/ref/llama-bench-build}"
OUT="$ROOT/tests/data/golden/cli-kvq"
PY="${PYTHON:-python3}"
FILTER="${1:-.}"
EXE="$BUILD/bin/llama-completion"

[ -x "$EXE" ] || { echo "make_kvq_goldens: no $EXE" >&2; exit 1; }
if [ -n "${LLAMA_ATTN_ROT_DISABLE:-}" ]; then
  echo "make_kvq_goldens: unset LLAMA_ATTN_ROT_DISABLE (these goldens are llama.cpp's defaults)" >&2
  exit 1
fi
NOTE="llama.cpp vendored in llama-cpp-python 0.3.36, GGML_NATIVE=ON on an Intel Xeon (AVX-512 F/BW/VL/VNNI/BF16/FP16, AVX-VNNI), at its defaults: LLAMA_ATTN_ROT_DISABLE unset, so a q8_0/q4_0 K (V) cache rotates Q and K (V and the attention output) by Walsh-Hadamard matrices"
PROMPTS="once_upon,single_token,story,code_c"

run() {  # NAME MODEL K/V
  local name="$1" model="$2" kv="$3"
  echo "$name" | grep -Eq -- "$FILTER" || return 0
  echo "== $name" >&2
  "$PY" "$ROOT/tools/reference/parity_cli.py" --llama-completion "$EXE" --models "$model" \
    --only "$PROMPTS" --cache-types "$kv" --build-note "$NOTE" --record "$OUT/$name.json"
}

# head size 64: K and V rotated by 64-element blocks
run smollm2-135m-instruct-q4_1-q8_0 SmolLM2-135M-Instruct.Q4_1.gguf q8_0/q8_0
# an f16 K (not rotated) beside a q4_0 V (rotated, and the output rotated back)
run smollm2-135m-instruct-q4_1-f16-q4_0 SmolLM2-135M-Instruct.Q4_1.gguf f16/q4_0
# head size 256: Q and K by one 256-element block, V by 64-element blocks
run gemma-3-270m-q4_k_m-q4_0 gemma-3-270m-q4_k_m.gguf q4_0/q4_0
# the Qwen2.5-0.5B-shaped fixture (head size 64, 24 layers, GQA 7:1)
run qwen2.5-0.5b-q4_0-q8_0 minfer-fixture-qwen2.5-0.5b-q4_0.gguf q8_0/q8_0
