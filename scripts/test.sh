#!/usr/bin/env bash
# The whole CI, as .ci/run calls it (a fresh clone needs nothing beside it):
#   1. scripts/setup.sh (Debian packages, Python tooling, the default model);
#   2. the ci preset (Release, -Werror): build everything, write the generated test
#      models into the model cache (tools/make_test_models.sh), run every test, the
#      slow golden tests (CTest label "golden") included — they run here only; where the
#      CUDA toolkit is installed (nvcc on PATH or in /usr/local/cuda) the CUDA backend is
#      built too (-DMINFER_CUDA=ON: its kernels compile and link; without a GPU its device
#      tests skip and the binaries list no CUDA device); MINFER_CI_CUDA=0 leaves it out;
#   3. the asan-ubsan preset (clang, ASan + UBSan): build, run the suite again without
#      the labels "golden", "long" and "no-sanitizer" (see ctest --print-labels);
#   4. scripts/fuzz.sh: each libFuzzer target for MINFER_FUZZ_SECONDS (default 30
#      here, a smoke run that keeps CI short; scripts/fuzz.sh alone defaults to 60) on
#      its seed corpus; a crash fails with the input saved and printed.
# Arguments go to both ctest runs (e.g. -R tokenizer). MINFER_TEST_SANITIZE=0 stops
# after step 2 (a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on relative paths below the checkout, so a clone in another folder reuses
# the objects a previous build of the same sources left.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
start=$SECONDS
times=()
mark() { times+=("$1 $((SECONDS - t0))s"); }

t0=$SECONDS; bash scripts/setup.sh; mark setup
t0=$SECONDS
cuda=OFF
if [ "${MINFER_CI_CUDA:-1}" != 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  cuda=ON
fi
cmake --preset ci -DMINFER_CUDA=$cuda >/dev/null
cmake --build --preset ci
mark "ci build (CUDA $cuda)"
# Deterministic test models (tiny fixtures and the Qwen2.5-0.5B-shaped ones) into the
# model cache; hash-checked, skipped when already present.
t0=$SECONDS; bash tools/make_test_models.sh build/ci; mark "test models"
t0=$SECONDS; ctest --preset ci -j2 "$@"; mark "ci tests"

if [ "${MINFER_TEST_SANITIZE:-1}" != 0 ]; then
  t0=$SECONDS
  cmake --preset asan-ubsan >/dev/null
  cmake --build --preset asan-ubsan
  mark "asan-ubsan build"
  t0=$SECONDS; ctest --preset asan-ubsan -j2 "$@"; mark "asan-ubsan tests"
  t0=$SECONDS; bash scripts/fuzz.sh build/asan-ubsan "${MINFER_FUZZ_SECONDS:-30}"; mark fuzz
fi
echo "test.sh: ok in $((SECONDS - start))s (${times[*]/%/;})" >&2
