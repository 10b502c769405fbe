#!/usr/bin/env bash
# Records llama-perplexity's results that tests/apps/test_perplexity.py checks minfer
# against (CI has no llama.cpp): for each case, llama-perplexity's stdout result lines
# ([i]ppl values and the final estimate, or the KL-divergence table and statistics) and
# the sha256 of its --kl-divergence-base logits file, into tests/data/perplexity/.
# Text: the first 64 KiB of the King James Bible as the Debian package bible-kjv prints
# it (scripts/setup.sh writes $MINFER_CACHE/text/kjv.txt).
#   usage: tools/reference/perplexity_reference.sh [avx2]
# With `avx2` the results go to reference-avx2.tsv and kl_tiny_qwen2_q4_1_vs_q8_0-avx2.txt:
# llama-perplexity built for a CPU without AVX-512 (GGML_NATIVE on such a CPU), whose
# float sums take 8 lanes where its AVX-512 build takes 16.
#   LLAMA_PERPLEXITY (default ~/.cache/minfer/ref/llama-bench-build/bin/llama-perplexity)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
LP="${LLAMA_PERPLEXITY:-$CACHE/ref/llama-bench-build/bin/llama-perplexity}"
OUT="$ROOT/tests/data/perplexity"
SUFFIX=""
[ "${1:-}" = avx2 ] && SUFFIX="-avx2"
REF="$OUT/reference$SUFFIX.tsv"
KL="$OUT/kl_tiny_qwen2_q4_1_vs_q8_0$SUFFIX.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
head -c 65536 "$CACHE/text/kjv.txt" >"$tmp/text.txt"
ARGS=(-c 32 -b 32 --chunks 8 -t 2)
{
  echo "# llama-perplexity ${ARGS[*]} on the first 64 KiB of kjv.txt (llama.cpp of llama-cpp-python 0.3.36${SUFFIX:+, AVX2-only build})"
  printf 'text\t%s\n' "$(sha256sum "$tmp/text.txt" | cut -d' ' -f1)"
} >"$REF"
for m in SmolLM2-135M-Instruct.Q4_1 minfer-fixture-tiny-qwen2-q8_0 minfer-fixture-tiny-qwen2-q4_k_m \
  minfer-fixture-tiny-qwen2-q4_0 minfer-fixture-tiny-qwen2-f16 minfer-fixture-tiny-llama-f32; do
  f="$CACHE/models/$m.gguf"
  "$LP" -m "$f" -f "$tmp/text.txt" "${ARGS[@]}" --kl-divergence-base "$tmp/$m.logits" >"$tmp/out" 2>"$tmp/err"
  ppl="$(grep '^\[1\]' "$tmp/out")"
  final="$(grep -o 'Final estimate: .*' "$tmp/err")"
  printf 'ppl\t%s\t%s\t%s\t%s\t%s\n' "$m" "$(sha256sum "$f" | cut -d' ' -f1)" \
    "$(sha256sum "$tmp/$m.logits" | cut -d' ' -f1)" "$ppl" "$final" >>"$REF"
done
# KL divergence of the tiny qwen2 F32 fixture quantized to Q4_1 by llama-quantize
# (minfer quantize writes the same bytes) against the Q8_0 fixture's logits.
LQ="${LLAMA_QUANTIZE:-$(dirname "$LP")/llama-quantize}"
"$LQ" "$CACHE/models/minfer-fixture-tiny-qwen2-f32.gguf" "$tmp/q4_1.gguf" Q4_1 2 >/dev/null 2>&1
printf 'q4_1\t%s\n' "$(sha256sum "$tmp/q4_1.gguf" | cut -d' ' -f1)" >>"$REF"
"$LP" -m "$tmp/q4_1.gguf" --kl-divergence-base "$tmp/minfer-fixture-tiny-qwen2-q8_0.logits" \
  --kl-divergence -b 32 -t 2 >"$tmp/kl" 2>/dev/null
sed -n '/^chunk /,$p' "$tmp/kl" | sed '/^llama_perf\|^$/d' >"$KL"
echo "recorded $REF and $KL" >&2
