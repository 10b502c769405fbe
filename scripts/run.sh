#!/usr/bin/env bash
# Build the minfer binary (release preset, that one target only: no tests, no tools)
# and run its main job — text generation with the model's chat template — on the
# default model (fetched by setup.sh).
# Arguments replace the default prompt, e.g.: scripts/run.sh "Why is the sky blue?"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target minfer
MODEL="${MINFER_CACHE:-$HOME/.cache/minfer}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT="${*:-Write a short poem about the sea.}"
exec build/release/apps/minfer/minfer "$MODEL" "$PROMPT" -n 128
