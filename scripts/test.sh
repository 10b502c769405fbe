#!/usr/bin/env bash
# Build everything with the CI preset (-Werror) and run every test (CTest: GoogleTest
# binaries and the pytest suites). Runs scripts/setup.sh first, and writes the
# generated test models (tools/make_test_models.sh) into the model cache.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset ci >/dev/null
cmake --build --preset ci
# Deterministic test models (tiny fixtures and the Qwen2.5-0.5B-shaped ones) into the
# model cache; hash-checked, skipped when already present.
bash tools/make_test_models.sh build/ci
ctest --preset ci -j2 "$@"
