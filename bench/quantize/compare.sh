#!/usr/bin/env bash
# minfer quantize vs llama-quantize on the same input, type and thread count: wall and
# CPU seconds of each and whether the outputs are byte-identical. One tab-separated line
# per type; the load average before each pair is printed with it.
#   usage: bench/quantize/compare.sh IN.gguf TYPE [TYPE ...]
#   MINFER_BIN (default build/perf/apps/minfer/minfer), LLAMA_QUANTIZE (default
#   ~/.cache/minfer/ref/llama-bench-build/bin/llama-quantize), THREADS (2)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MINFER="${MINFER_BIN:-$ROOT/build/perf/apps/minfer/minfer}"
LQ="${LLAMA_QUANTIZE:-$HOME/.cache/minfer/ref/llama-bench-build/bin/llama-quantize}"
THREADS="${THREADS:-2}"
IN="$1"
shift
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf 'type\tllama_wall_s\tllama_cpu_s\tminfer_wall_s\tminfer_cpu_s\tidentical\tload_before\n'
for t in "$@"; do
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f '%e %U %S' -o "$tmp/l.time" "$LQ" "$IN" "$tmp/l.gguf" "$t" "$THREADS" >/dev/null 2>&1
  /usr/bin/time -f '%e %U %S' -o "$tmp/m.time" "$MINFER" quantize "$IN" "$tmp/m.gguf" "$t" -t "$THREADS" >/dev/null
  read -r lw lu ls <"$tmp/l.time"
  read -r mw mu ms <"$tmp/m.time"
  same=no; cmp -s "$tmp/l.gguf" "$tmp/m.gguf" && same=yes
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$lw" "$(python3 -c "print(round($lu+$ls,1))")" \
    "$mw" "$(python3 -c "print(round($mu+$ms,1))")" "$same" "$load"
  rm -f "$tmp/l.gguf" "$tmp/m.gguf"
done
