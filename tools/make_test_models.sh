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

# all-MiniLM-L6-v2's f32 GGUF (tests/engine/embed_test.cpp, tests/server/test_embeddings.py),
# converted by this build's `minfer convert` from the folder scripts/setup.sh fetched; its
# tensors must be the ones llama.cpp's converter writes (tests/data/convert/minilm-f32.json).
MINILM="$MODELS/all-MiniLM-L6-v2"
MINILM_GGUF="$MODELS/all-MiniLM-L6-v2-f32.gguf"
if [ -s "$MINILM/model.safetensors" ] && echo "all-MiniLM-L6-v2" | grep -Eq -- "$FILTER"; then
  MINFER="$BUILD/apps/minfer/minfer"
  [ -x "$MINFER" ] || cmake --build "$BUILD" --target minfer
  if [ ! -s "$MINILM_GGUF" ]; then
    echo "make_test_models: converting $MINILM to $MINILM_GGUF" >&2
    "$MINFER" convert "$MINILM" "$MINILM_GGUF.part" --outtype f32 >/dev/null 2>&1
    mv "$MINILM_GGUF.part" "$MINILM_GGUF"
  fi
  want=$(grep -o '"file_sha256": *"[0-9a-f]*"' "$TESTDATA/convert/minilm-f32.json" | grep -o '[0-9a-f]\{64\}')
  got=$(sha256sum "$MINILM_GGUF" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "make_test_models: $MINILM_GGUF sha256 $got, llama.cpp's converter wrote $want" >&2
    status=1
  fi
fi
exit $status
