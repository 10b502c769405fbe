#!/usr/bin/env bash
# Regenerates the committed llama.cpp goldens in tests/data/golden/ (needs
# llama-cpp-python, the model cache from scripts/setup.sh, and the fixture models from
# tools/make_test_models.sh). Runs niced, one model at a time, 2 threads.
#   usage: tools/reference/make_goldens.sh [NAME_FILTER]   (grep -E on the golden name)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
OUT="$ROOT/tests/data/golden"
REF="$ROOT/tools/reference"
PY="${PYTHON:-python3}"
FILTER="${1:-.}"

run() {  # NAME MODEL PROMPTS [extra args]
  local name="$1" model="$2" prompts="$3"
  shift 3
  echo "$name" | grep -Eq -- "$FILTER" || return 0
  echo "make_goldens: $name" >&2
  nice "$PY" "$REF/llamacpp_goldens.py" --model "$model" --prompts "$prompts" --out "$OUT/$name" \
    --threads 2 --n-predict 64 --top-k 10 --n-ctx 4096 "$@"
}

run smollm2-135m-instruct-q4_1 "$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$REF/prompts/smollm2.json"
run gemma-3-270m-q4_k_m "$CACHE/models/gemma-3-270m-q4_k_m.gguf" "$REF/prompts/gemma3.json"
while IFS=$'\t' read -r name _ _ _ _ _ _; do
  case "$name" in ''|'#'*) continue ;; esac
  run "$name" "$CACHE/models/minfer-fixture-$name.gguf" "$REF/prompts/fixture.json" --fixture "$name"
done < "$REF/test_models.tsv"
