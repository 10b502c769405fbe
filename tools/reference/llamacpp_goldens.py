#!/usr/bin/env python3
"""Reference goldens from llama.cpp (through llama-cpp-python's C API bindings).

For one GGUF and a prompts file, records what llama.cpp does in a plain greedy run:
the prompt token ids (llama.cpp's tokenizer, BOS/EOS added as the vocabulary says,
special tokens parsed as llama-completion parses them), the greedy continuation of
N tokens (argmax, ties to the lowest id, no penalties, stop at end-of-generation),
the top-k ids and logits of every step, and the full logits of the last prompt
position for the prompts that ask for them.

Settings are llama.cpp's own defaults for an inference user (llama-completion /
common_params), not llama-cpp-python's high-level `Llama` defaults (which turn flash
attention off): n_batch 2048, n_ubatch 512, flash attention `auto` (on for the CPU),
K and V cache f16, the CPU weight repacking buffers on (llama.cpp repacks e.g. Q4_0
for AVX2/AVX-512 at load). The prompt is decoded in one batch with one output (the
last position), then one token per decode, each in a fresh context per prompt —
what llama-completion does. Only n_ctx (fixed, recorded) and n_threads (fixed,
recorded) are chosen here. Every setting is written into the golden file.

Output (DIR):
  golden.json   settings, model identity, per prompt: ids, generation, top-k per step
  logits.f16    little-endian IEEE half floats: for each prompt with full_logits, the
                n_vocab logits of the last prompt position (offsets in golden.json)

usage: llamacpp_goldens.py --model M.gguf --prompts P.json --out DIR [--n-predict 64]
       [--threads 2] [--top-k 10] [--n-ctx 4096] [--fixture NAME]
Prompts file: JSON list of {"name", "text", "full_logits": bool}.
"""
from __future__ import annotations

import argparse
import base64
import ctypes
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

try:
    import llama_cpp as L
except ImportError:  # pragma: no cover
    sys.exit("llamacpp_goldens: llama-cpp-python is not installed (pip install llama-cpp-python)")

FORMAT_VERSION = 1

_log_lines: list[str] = []


@L.llama_log_callback
def _log_cb(level, text, user_data):  # keep llama.cpp's log for the provenance fields
    _log_lines.append(text.decode("utf-8", "replace"))


def dump_json(obj, indent: int = 0) -> str:
    """JSON with one line per list of scalars (readable diffs, small files)."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dump_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(pad + dump_json(v, indent + 1) for v in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj, ensure_ascii=False)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenize(vocab, text: str, add_special: bool, parse_special: bool) -> list[int]:
    data = text.encode("utf-8")
    n_max = len(data) + 16
    buf = (L.llama_token * n_max)()
    n = L.llama_tokenize(vocab, data, len(data), buf, n_max, add_special, parse_special)
    if n < 0:
        raise RuntimeError(f"tokenize: buffer too small ({-n})")
    return list(buf[:n])


def piece(vocab, tok: int, special: bool) -> bytes:
    buf = ctypes.create_string_buffer(256)
    n = L.llama_token_to_piece(vocab, tok, buf, len(buf), 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = L.llama_token_to_piece(vocab, tok, buf, len(buf), 0, special)
    return buf.raw[:n]


def decode(ctx, tokens: list[int]) -> None:
    arr = (L.llama_token * len(tokens))(*tokens)
    batch = L.llama_batch_get_one(arr, len(tokens))  # output for the last token only
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")


def last_logits(ctx, n_vocab: int) -> np.ndarray:
    ptr = L.llama_get_logits_ith(ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float32, copy=True)


def top_k(logits: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    # Stable order: by logit descending, ties by id ascending (np.lexsort keys: last is primary).
    idx = np.lexsort((np.arange(len(logits)), -logits))[:k]
    return [int(i) for i in idx], [round(float(logits[i]), 5) for i in idx]


def context_params(args):
    p = L.llama_context_default_params()  # llama.cpp's defaults
    p.n_ctx = args.n_ctx
    p.n_threads = args.threads
    p.n_threads_batch = args.threads
    p.n_batch = 2048  # common_params (llama-completion) defaults, spelled out
    p.n_ubatch = 512
    p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_AUTO
    return p


def run_prompt(model, vocab, n_vocab: int, prompt: dict, args, add_special: bool):
    parse_special = prompt.get("parse_special", True)
    ids = tokenize(vocab, prompt["text"], add_special, parse_special)
    if len(ids) + args.n_predict > args.n_ctx:
        raise RuntimeError(f"prompt {prompt['name']}: {len(ids)} tokens + {args.n_predict} > n_ctx")
    ctx = L.llama_init_from_model(model, context_params(args))
    if not ctx:
        raise RuntimeError("llama_init_from_model failed")
    try:
        decode(ctx, ids)
        logits = last_logits(ctx, n_vocab)
        prompt_logits = logits.copy()
        generated: list[int] = []
        steps = []
        eog_id = None
        for step in range(args.n_predict):
            tok = int(np.argmax(logits))  # first maximum = lowest id, as llama.cpp's greedy sampler
            top_ids, top_vals = top_k(logits, args.top_k)
            steps.append({"top_ids": top_ids, "top_logits": top_vals})
            if L.llama_vocab_is_eog(vocab, tok):
                eog_id = tok
                break
            generated.append(tok)
            if step + 1 < args.n_predict:
                decode(ctx, [tok])
                logits = last_logits(ctx, n_vocab)
    finally:
        L.llama_free(ctx)
    text = b"".join(piece(vocab, t, False) for t in generated)
    rec = {
        "name": prompt["name"],
        "text": prompt["text"],
        "parse_special": parse_special,
        "prompt_ids": ids,
        "generated_ids": generated,
        "stopped_at_eog": eog_id is not None,
        "eog_id": eog_id,
        # llama_token_to_piece(special=false) of the generated ids, as llama-completion prints
        "generated_text_b64": base64.b64encode(text).decode("ascii"),
        "generated_text": text.decode("utf-8", "replace"),
        "steps": steps,
    }
    return rec, (prompt_logits if prompt.get("full_logits") else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--prompts", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--extra-bufts", action="store_true",
                    help="keep llama.cpp's AMX / CPU_REPACK weight buffers (its default; off here, see main)")
    ap.add_argument("--fixture", help="name in tools/reference/test_models.tsv (model written by minfer-model-fixture)")
    args = ap.parse_args()

    prompts = json.loads(args.prompts.read_text(encoding="utf-8"))
    L.llama_log_set(_log_cb, ctypes.c_void_p(0))
    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    # Extra CPU buffer types (AMX, CPU_REPACK) off: with GGML_NATIVE on this machine's
    # CPU, ggml's AMX path faults on its first tile instruction (Q4_1/Q8_0 weights), and
    # the runtime switch that avoids it also turns repacking off. The plain ggml CPU
    # kernels remain (activations quantized to the weight type's vec_dot_type).
    mparams.use_extra_bufts = args.extra_bufts
    model = L.llama_model_load_from_file(str(args.model).encode(), mparams)
    if not model:
        sys.exit(f"llamacpp_goldens: cannot load {args.model}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    add_special = True  # llama_tokenize(add_special=true): BOS/EOS as the vocabulary's add_bos/add_eos say

    records, blobs = [], []
    offset = 0
    for p in prompts:
        rec, full = run_prompt(model, vocab, n_vocab, p, args, add_special)
        if full is not None:
            rec["full_logits"] = {"offset": offset, "count": n_vocab}
            blobs.append(full.astype("<f2").tobytes())
            offset += n_vocab
        records.append(rec)
        print(f"{p['name']}: {len(rec['prompt_ids'])} prompt ids, {len(rec['generated_ids'])} generated"
              f"{' (eog)' if rec['stopped_at_eog'] else ''}", file=sys.stderr)
    L.llama_model_free(model)

    log = "".join(_log_lines)
    resolved = sorted({ln.strip() for ln in log.splitlines()
                       if any(k in ln for k in ("flash_attn", "Flash Attention", "REPACK", "type_k", "n_ctx_seq", "AMX"))})
    golden = {
        "format_version": FORMAT_VERSION,
        "generator": "tools/reference/llamacpp_goldens.py",
        "reference": {
            "llama_cpp_python": L.__version__,
            "system_info": L.llama_print_system_info().decode(),
            "log_excerpt": resolved[:40],
        },
        "model": {
            "file": args.model.name,
            "sha256": sha256(args.model),
            "size": args.model.stat().st_size,
            "fixture": args.fixture,
            "n_vocab": n_vocab,
        },
        "settings": {
            "n_ctx": args.n_ctx,
            "n_threads": args.threads,
            "n_batch": 2048,
            "n_ubatch": 512,
            "flash_attn": "auto (llama.cpp default; see log_excerpt for what it resolved to)",
            "type_k": "f16",
            "type_v": "f16",
            "use_extra_bufts": args.extra_bufts,
            "use_extra_bufts_note": (
                "on (llama.cpp's default): the library's extra CPU weight buffers are used; with "
                "REPACK in system_info, Q4_0 / Q4_K / IQ4_NL matmul weights whose row count is a "
                "multiple of 8 are repacked at load into 8-row interleaved blocks and multiplied by "
                "ggml's repack GEMV/GEMM (log_excerpt shows the CPU_REPACK buffer)"
                if args.extra_bufts else
                "off: no AMX and no CPU_REPACK weight repacking (AMX faults on the recording "
                "machine); weights stay in GGUF layout, ggml's plain CPU kernels"),
            "library": os.environ.get("LLAMA_CPP_LIB_PATH") and "LLAMA_CPP_LIB_PATH (see make_repack_goldens.sh)"
                       or "llama-cpp-python's own build",
            # ggml-cpu's tiled K-quant matmul (batches >= 8 rows; on unless GGML_CPU_TILED_MM=0)
            "ggml_cpu_tiled_mm": os.environ.get("GGML_CPU_TILED_MM", "default (on)"),
            "sampling": "greedy: argmax of raw logits, ties to the lowest id; no penalties, no temperature",
            "n_predict": args.n_predict,
            "stop": "end-of-generation token (llama_vocab_is_eog); it is not part of generated_ids",
            "tokenize": "llama_tokenize(add_special=true, parse_special=per prompt)",
            "prompt_decode": "one llama_decode of the whole prompt, logits of the last position only; "
                             "then one token per llama_decode; a fresh context per prompt",
            "top_k": args.top_k,
            "full_logits_dtype": "f16",
        },
        "prompts": records,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "golden.json").write_text(dump_json(golden) + "\n", encoding="utf-8")
    logits_path = args.out / "logits.f16"
    if blobs:
        logits_path.write_bytes(b"".join(blobs))
    elif logits_path.exists():
        logits_path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
