#!/usr/bin/env bash
# Quantizes GGUF files with llama.cpp's llama-quantize and with `minfer quantize` to
# every type minfer supports and compares the outputs byte for byte; prints one line per
# (model, type): the sha256 of llama-quantize's file and whether ours is identical.
# With --record, writes tests/data/quantize/sha256.tsv (what test_quantize.py checks,
# since CI has no llama.cpp) for the test fixture it generates.
#   usage: tools/reference/quantize_identity.sh [--record] [MODEL.gguf ...]
#   MINFER_BIN       minfer (default build/tools/apps/minfer/minfer)
#   MINFER_FIXTURE   minfer-model-fixture (default build/tools/tools/model_fixture/...)
#   LLAMA_QUANTIZE   llama-quantize (default ~/.cache/minfer/ref/llama-bench-build/bin/llama-quantize)
#   THREADS          threads for both (default 2)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MINFER="${MINFER_BIN:-$ROOT/build/tools/apps/minfer/minfer}"
FIXTURE="${MINFER_FIXTURE:-$ROOT/build/tools/tools/model_fixture/minfer-model-fixture}"
LQ="${LLAMA_QUANTIZE:-$HOME/.cache/minfer/ref/llama-bench-build/bin/llama-quantize}"
THREADS="${THREADS:-2}"
TYPES="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K F16 BF16 F32"
record=0
if [ "${1:-}" = "--record" ]; then record=1; shift; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
models=("$@")
if [ $record = 1 ]; then
  # The test fixture (tests/apps/test_quantize.py writes the same one): llama, rows of
  # 288 (not a multiple of 256: the fallbacks) and 768 (ffn_down: k-quants proper).
  "$FIXTURE" $(cat "$ROOT/tests/data/quantize/fixture.args") \
    --vocab "$ROOT/tests/data/vocab/ggml-vocab-llama-spm.gguf" -o "$tmp/fixture.gguf" >/dev/null
  models=("$tmp/fixture.gguf")
  out="$ROOT/tests/data/quantize/sha256.tsv"
  {
    echo "# sha256 of llama-quantize's output for the fixture of fixture.args, per TYPE"
    echo "# (recorded by tools/reference/quantize_identity.sh --record; llama.cpp of llama-cpp-python 0.3.36)"
    printf 'input\t%s\n' "$(sha256sum "$tmp/fixture.gguf" | cut -d' ' -f1)"
  } >"$out.part"
fi
status=0
for m in "${models[@]}"; do
  for t in $TYPES; do
    "$LQ" "$m" "$tmp/ref.gguf" "$t" "$THREADS" >"$tmp/ref.log" 2>&1 || { echo "llama-quantize failed on $m $t" >&2; tail -3 "$tmp/ref.log" >&2; exit 1; }
    "$MINFER" quantize "$m" "$tmp/ours.gguf" "$t" -t "$THREADS" >"$tmp/ours.log" 2>&1 || { echo "minfer quantize failed on $m $t" >&2; tail -3 "$tmp/ours.log" >&2; exit 1; }
    ref="$(sha256sum "$tmp/ref.gguf" | cut -d' ' -f1)"
    ours="$(sha256sum "$tmp/ours.gguf" | cut -d' ' -f1)"
    same=identical; [ "$ref" = "$ours" ] || { same=DIFFERENT; status=1; }
    printf '%s\t%s\t%s\t%s\n' "$(basename "$m")" "$t" "$ref" "$same"
    [ $record = 1 ] && printf '%s\t%s\n' "$t" "$ref" >>"$out.part"
  done
done
[ $record = 1 ] && mv "$out.part" "$out"
exit $status
