#!/usr/bin/env bash
# Records the sha256 of llama-gguf-split's parts of the quantize test fixture
# (tests/data/quantize/fixture.args) for --split-max-tensors 10 and --split-max-size 20M
# into tests/data/split/sha256.tsv, which tests/apps/test_split.py checks `minfer split`
# against (CI has no llama.cpp).
#   usage: tools/reference/split_reference.sh
#   MINFER_FIXTURE (default build/tools/tools/model_fixture/minfer-model-fixture),
#   LLAMA_GGUF_SPLIT (default ~/.cache/minfer/ref/llama-bench-build/bin/llama-gguf-split)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FIXTURE="${MINFER_FIXTURE:-$ROOT/build/tools/tools/model_fixture/minfer-model-fixture}"
GS="${LLAMA_GGUF_SPLIT:-$HOME/.cache/minfer/ref/llama-bench-build/bin/llama-gguf-split}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2046
"$FIXTURE" $(cat "$ROOT/tests/data/quantize/fixture.args") \
  --vocab "$ROOT/tests/data/vocab/ggml-vocab-llama-spm.gguf" -o "$tmp/in.gguf" >/dev/null
out="$ROOT/tests/data/split/sha256.tsv"
mkdir -p "$(dirname "$out")"
echo "# llama-gguf-split's parts of the quantize fixture (tools/reference/split_reference.sh)" >"$out"
printf 'input\t%s\n' "$(sha256sum "$tmp/in.gguf" | cut -d' ' -f1)" >>"$out"
"$GS" --split --split-max-tensors 10 "$tmp/in.gguf" "$tmp/t" >/dev/null
"$GS" --split --split-max-size 20M "$tmp/in.gguf" "$tmp/s" >/dev/null
for f in "$tmp"/t-*.gguf; do printf 'tensors10\t%s\t%s\n' "$(basename "$f" | sed 's/^t//')" "$(sha256sum "$f" | cut -d' ' -f1)"; done >>"$out"
for f in "$tmp"/s-*.gguf; do printf 'size20M\t%s\t%s\n' "$(basename "$f" | sed 's/^s//')" "$(sha256sum "$f" | cut -d' ' -f1)"; done >>"$out"
cat "$out"
