#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time on its seed corpus
# (tests/fuzz/corpus/<target>/, plus tests/data/templates for the template engine).
#   usage: scripts/fuzz.sh [BUILD_DIR] [SECONDS] [TARGET...]
#   BUILD_DIR  a tree configured with the asan-ubsan or fuzz preset (default build/asan-ubsan)
#   SECONDS    run time per target (default 60; MINFER_FUZZ_SECONDS overrides too)
#   TARGET     fuzz_gguf, fuzz_tokenizer, ... (default: every fuzz_* target of tests/fuzz)
#   MINFER_FUZZ_JOBS  targets run side by side (default 2)
# Each target works in BUILD_DIR/fuzz-run/<target>/: corpus/ (the seeds plus what it
# found; the repository is never written) and artifacts/ (crash-*, leak-*, timeout-*,
# oom-*). A crash, leak, timeout (10 s per input) or memory blow-up (2 GiB) fails the
# script; every saved input is printed with its path and a hex dump, and can be
# replayed with: BUILD_DIR/tests/fuzz/<target> ARTIFACT
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build/asan-ubsan}" && pwd)"  # absolute: fuzz_cli_args changes directory
SECONDS_EACH="${2:-${MINFER_FUZZ_SECONDS:-60}}"
shift $(( $# > 2 ? 2 : $# ))
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  mapfile -t TARGETS < <(sed -n 's/^ *minfer_add_fuzzer(\(fuzz_[a-z0-9_]*\).*/\1/p' \
    "$ROOT/tests/fuzz/CMakeLists.txt")
fi
JOBS="${MINFER_FUZZ_JOBS:-2}"
RUN="$BUILD/fuzz-run"

cmake --build "$BUILD" --target "${TARGETS[@]}"

run_one() {  # target → exit status of libFuzzer (0: nothing found in the time)
  local t="$1" dir="$RUN/$1"
  rm -rf "$dir/artifacts"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  local seeds=("$ROOT/tests/fuzz/corpus/$t")
  [ "$t" = fuzz_chat_template ] && seeds+=("$ROOT/tests/data/templates")
  local extra=()
  # The CLI writes usage and errors on stdout/stderr for every input; libFuzzer's own
  # report (and a sanitizer's) still reaches stderr with close_fd_mask=3.
  [ "$t" = fuzz_cli_args ] && extra+=(-close_fd_mask=3)
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "${extra[@]}" \
      "$dir/corpus" "${seeds[@]}" >"$dir/log.txt" 2>&1
}

status=0
pids=() names=()
for t in "${TARGETS[@]}"; do
  echo "fuzz: $t for ${SECONDS_EACH}s (log: $RUN/$t/log.txt)" >&2
  mkdir -p "$RUN/$t"
  run_one "$t" &
  pids+=($!) names+=("$t")
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}" || true
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || true; done

for t in "${names[@]}"; do
  dir="$RUN/$t"
  stats=$(grep -E "^stat::number_of_executed_units|^#[0-9]+ *DONE" "$dir/log.txt" | tr '\n' ' ' || true)
  found=("$dir"/artifacts/*)
  if [ -e "${found[0]}" ] || ! grep -q "^stat::number_of_executed_units" "$dir/log.txt"; then
    status=1
    echo "fuzz: $t FAILED; last lines of $dir/log.txt:" >&2
    tail -n 60 "$dir/log.txt" >&2
    for a in "${found[@]}"; do
      [ -e "$a" ] || continue
      echo "fuzz: $t: input saved at $a ($(stat -c %s "$a") bytes); replay: $BUILD/tests/fuzz/$t $a" >&2
      od -A x -t x1z -v "$a" | head -n 32 >&2
    done
  else
    echo "fuzz: $t ok: $stats" >&2
  fi
done
exit $status
