#!/usr/bin/env bash
# Build everything with the CI preset (-Werror) and run every test (CTest: GoogleTest
# binaries and the pytest suites). Runs scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci -j2 "$@"
