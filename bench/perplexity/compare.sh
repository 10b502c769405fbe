#!/usr/bin/env bash
# minfer perplexity vs llama-perplexity on the same GGUF, text, context and threads:
# the final estimate of each, their relative difference, wall and CPU time, tokens/s.
# One line per model (tab-separated) on stdout; the full outputs under $OUT (default
# a temporary folder). The machine's load average is printed with every run.
#   usage: bench/perplexity/compare.sh TEXT CHUNKS MODEL.gguf [MODEL.gguf ...]
#   MINFER_BIN (default build/perf/apps/minfer/minfer), LLAMA_PERPLEXITY (default
#   ~/.cache/minfer/ref/llama-bench-build/bin/llama-perplexity), THREADS (2), CTX (512),
#   BATCH (2048), MINFER_FLAGS (extra flags for minfer, e.g. "--numerics llamacpp")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MINFER="${MINFER_BIN:-$ROOT/build/perf/apps/minfer/minfer}"
LP="${LLAMA_PERPLEXITY:-$HOME/.cache/minfer/ref/llama-bench-build/bin/llama-perplexity}"
THREADS="${THREADS:-2}" CTX="${CTX:-512}" BATCH="${BATCH:-2048}"
TEXT="$1" CHUNKS="$2"
shift 2
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
final() { grep -o 'Final estimate: PPL = [0-9.]* +/- [0-9.]*' "$1" | awk '{print $5, $7}'; }
# wall seconds, user+sys seconds of a command (GNU time's format)
timed() { local log="$1"; shift; /usr/bin/time -f '%e %U %S' -o "$log.time" "$@" >"$log" 2>&1; }
printf 'model\tllama_ppl\tminfer_ppl\trel_diff\tllama_wall_s\tllama_cpu_s\tminfer_wall_s\tminfer_cpu_s\tload_before\n'
for m in "$@"; do
  name="$(basename "$m" .gguf)"
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  timed "$OUT/$name.llama.log" "$LP" -m "$m" -f "$TEXT" -c "$CTX" -b "$BATCH" --chunks "$CHUNKS" -t "$THREADS"
  # shellcheck disable=SC2086
  timed "$OUT/$name.minfer.log" "$MINFER" perplexity "$m" -f "$TEXT" -c "$CTX" -b "$BATCH" --chunks "$CHUNKS" -t "$THREADS" ${MINFER_FLAGS:-}
  read -r lp lpe < <(final "$OUT/$name.llama.log")
  read -r mp mpe < <(final "$OUT/$name.minfer.log")
  read -r lw lu ls <"$OUT/$name.llama.log.time"
  read -r mw mu ms <"$OUT/$name.minfer.log.time"
  rel="$(python3 -c "print(f'{($mp-$lp)/$lp*100:+.3f}%')")"
  printf '%s\t%s±%s\t%s±%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$lp" "$lpe" "$mp" "$mpe" "$rel" \
    "$lw" "$(python3 -c "print(round($lu+$ls,1))")" "$mw" "$(python3 -c "print(round($mu+$ms,1))")" "$load"
done
