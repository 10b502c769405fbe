#!/usr/bin/env bash
# Writes every test model of tools/reference/test_models.tsv into the model cache
# with minfer-model-fixture (deterministic: the same bytes on every machine), checks
# each against its recorded sha256, and skips files that are already there and match.
#   usage: tools/make_test_models.sh [BUILD_DIR] [NAME_FILTER]
#   BUILD_DIR   a configured and built tree (default: build), needs the targets
#               minfer-model-fixture and minfer-hf-vocab (built here if missing)
#   NAME_FILTER only models whose name matches this grep -E pattern
#   MINFER_CACHE  cache root (default ~/.cache/minfer): models in $MINFER_CACHE/models,
#                 vocabularies in $MINFER_CACHE/vocab
#   MINFER_FIXTURE_THREADS  generator threads (default: all cores; output does not depend on it)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
FILTER="${2:-.}"
CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
MODELS="$CACHE/models"
VOCABS="$CACHE/vocab"
TESTDATA="$ROOT/tests/data"
MANIFEST="$ROOT/tools/reference/test_models.tsv"
FIXTURE="$BUILD/tools/model_fixture/minfer-model-fixture"
HF_VOCAB="$BUILD/tools/hf_vocab/minfer-hf-vocab"
THREADS="${MINFER_FIXTURE_THREADS:-$(nproc)}"

if [ ! -x "$FIXTURE" ] || [ ! -x "$HF_VOCAB" ]; then
  cmake --build "$BUILD" --target minfer-model-fixture minfer-hf-vocab
fi
mkdir -p "$MODELS" "$VOCABS"

vocab_path() {
  case "$1" in
    qwen2.5)
      local v="$VOCABS/qwen2.5-vocab.gguf"
      if [ ! -s "$v" ]; then
        "$HF_VOCAB" -q "$TESTDATA/tokenizers/qwen3/tokenizer.json" --arch qwen2 \
          --name "Qwen2.5 vocabulary" --vocab-size 151936 -o "$v.part"
        mv "$v.part" "$v"
      fi
      echo "$v" ;;
    *) echo "$TESTDATA/vocab/ggml-vocab-$1.gguf" ;;
  esac
}

status=0
while IFS=$'\t' read -r name arch preset type vocab seed sha; do
  case "$name" in ''|'#'*) continue ;; esac
  echo "$name" | grep -Eq -- "$FILTER" || continue
  out="$MODELS/minfer-fixture-$name.gguf"
  if [ -s "$out" ] && [ "$sha" != "-" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
    echo "make_test_models: $name: up to date" >&2
    continue
  fi
  echo "make_test_models: writing $out" >&2
  nice "$FIXTURE" --arch "$arch" --preset "$preset" --type "$type" --seed "$seed" \
    --vocab "$(vocab_path "$vocab")" --name "minfer fixture $name" --threads "$THREADS" -o "$out.part"
  mv "$out.part" "$out"
  got="$(sha256sum "$out" | cut -d' ' -f1)"
  if [ "$sha" = "-" ]; then
    echo "make_test_models: $name: sha256 $got (not recorded yet)" >&2
  elif [ "$got" != "$sha" ]; then
    echo "make_test_models: $name: sha256 $got differs from the recorded $sha;" \
      "the goldens in tests/data/golden/$name no longer describe this file" >&2
    status=1
  fi
done < "$MANIFEST"
exit $status
