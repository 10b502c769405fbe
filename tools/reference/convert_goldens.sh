#!/usr/bin/env bash
# Records what llama.cpp generates from models made by `minfer convert`, for
# tests/apps/test_convert.py: the tiny checkpoints of tests/apps/hf_checkpoint.py are
# converted (the files are byte-identical to llama.cpp's convert_hf_to_gguf.py output,
# which cli_convert_test checks), then tools/reference/llamacpp_goldens.py runs llama.cpp
# greedy on each (16 tokens, top-2 logits per step, no full logits) and writes
# tests/data/convert/golden-<config>-<outtype>/golden.json.
#   usage: tools/reference/convert_goldens.sh MINFER_BIN
#   needs: llama-cpp-python (PYTHONPATH / LLAMA_CPP_LIB_PATH as for llamacpp_goldens.py),
#          numpy and safetensors
# Recorded with PYTHONPATH=~/.cache/minfer/ref/llama_cpp_python-0.3.36
# LLAMA_CPP_LIB_PATH=~/.cache/minfer/ref/llama-bench-build/bin (llama.cpp of
# llama-cpp-python 0.3.36, built from its vendor/llama.cpp).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MINFER="${1:?usage: convert_goldens.sh MINFER_BIN}"
PY="${PYTHON:-python3}"
OUT="$ROOT/tests/data/convert"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

for case in llama-f32 qwen2-f16 qwen3-q8_0; do
  config="${case%-*}" outtype="${case##*-}"
  [ -d "$TMP/$config" ] || "$PY" "$ROOT/tests/apps/hf_checkpoint.py" "$config" "$TMP/$config" \
    "$ROOT/tests/data/tokenizers"
  "$MINFER" convert "$TMP/$config" "$TMP/$case.gguf" --outtype "$outtype" 2>/dev/null
  nice "$PY" "$ROOT/tools/reference/llamacpp_goldens.py" --model "$TMP/$case.gguf" \
    --prompts "$OUT/golden-prompts.json" --out "$OUT/golden-$case" \
    --threads 2 --n-predict 16 --top-k 2 --n-ctx 512
  rm -f "$OUT/golden-$case/logits.f16"  # empty: no prompt asks for full logits
done
