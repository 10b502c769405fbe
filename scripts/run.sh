#!/usr/bin/env bash
# Build the release preset and run minfer on the default model (fetched by setup.sh).
# Extra arguments go to minfer, e.g.: scripts/run.sh tokenize "Hello world" --ids
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
if [ $# -eq 0 ]; then set -- info; fi
exec build/release/apps/minfer/minfer "$@"
