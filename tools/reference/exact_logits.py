#!/usr/bin/env python3
"""Exact last-prompt logits for the goldens: an f64 numpy forward (numpy_forward.Model,
weights expanded by gguf.quants.dequantize, bit-exact with ggml) over each golden
prompt's prompt_ids. Neither llama.cpp nor minfer computes this; the golden test measures
both against it, so "closer to the model's math" is a number, not an opinion.

Output, next to golden.json in each golden folder:
  exact.f16    little-endian IEEE half floats, n_vocab per prompt in golden order. The
               f16 rounding (relative 2^-11, i.e. ≤ 0.01 on a logit of 20) is far below
               the errors measured against it (rms 0.1-0.2 on quantized models) and
               below the float-model tolerance; the test adds it to every bound.
  exact.json   index: model identity, per prompt name/offset/count and the f64 argmax;
               with --steps also `steps`: per prompt, for every step k of llama.cpp's greedy
               run, the exact logits of llama.cpp's top ids at that step (the sequence
               prompt_ids + generated_ids[:k]). A mixture of experts makes this necessary:
               where two experts' router probabilities nearly tie, llama.cpp's f16 KV and
               attention rounding can pick the other expert and move its logits by O(1)
               while exact math (and an engine on it) does not.

usage: exact_logits.py GOLDEN_DIR [GOLDEN_DIR ...] [--models DIR] [--only-full-logits] [--steps]
       --only-full-logits: just the prompts that carry llama.cpp's full logits (for
        large vocabularies, to keep the committed data small); the test checks the
        prompts listed in exact.json
       (the model file named in golden.json is taken from DIR, default
        ~/.cache/minfer/models; its sha256 must match the golden's)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from numpy_forward import Model  # noqa: E402


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_exact(gdir: Path, models: Path, only_full: bool, steps: bool = False) -> None:
    golden = json.loads((gdir / "golden.json").read_text(encoding="utf-8"))
    path = models / golden["model"]["file"]
    digest = sha256(path)
    if digest != golden["model"]["sha256"]:
        sys.exit(f"exact_logits: {path} has sha256 {digest}, {gdir}/golden.json was recorded on "
                 f"{golden['model']['sha256']}")
    m = Model(str(path), dequantize=True)
    n_vocab = golden["model"]["n_vocab"]
    index, blobs = [], []
    for p in golden["prompts"]:
        if only_full and "full_logits" not in p:
            continue
        lg = m.forward(p["prompt_ids"])
        assert lg.shape == (n_vocab,), lg.shape
        index.append({"name": p["name"], "offset": len(blobs) * n_vocab, "count": n_vocab,
                      "argmax": int(np.argmax(lg)), "max": float(lg.max())})
        blobs.append(lg.astype("<f2").tobytes())
        print(f"{gdir.name}/{p['name']}: argmax {index[-1]['argmax']} ({lg.max():.4f})", file=sys.stderr)
    step_logits = {}
    if steps:
        for p in golden["prompts"]:
            rows = []
            for k, s in enumerate(p["steps"]):
                lg = m.forward(p["prompt_ids"] + p["generated_ids"][:k])
                rows.append([round(float(lg[i]), 5) for i in s["top_ids"]])
            step_logits[p["name"]] = rows
            print(f"{gdir.name}/{p['name']}: exact logits at llama.cpp's top ids, {len(rows)} steps",
                  file=sys.stderr)
    (gdir / "exact.f16").write_bytes(b"".join(blobs))
    meta = {
        "generator": "tools/reference/exact_logits.py",
        "math": "f64 forward of the dequantized weights (gguf.quants.dequantize); no f16 or "
                "quantized activations anywhere; last prompt position of prompt_ids",
        "model": {"file": golden["model"]["file"], "sha256": digest},
        "dtype": "f16",
        "prompts": index,
    }
    if steps:
        meta["steps"] = step_logits
    (gdir / "exact.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("golden_dirs", nargs="+", type=Path)
    ap.add_argument("--only-full-logits", action="store_true")
    ap.add_argument("--steps", action="store_true",
                    help="also exact logits at llama.cpp's top ids of every greedy step (exact.json)")
    ap.add_argument("--models", type=Path, default=Path.home() / ".cache" / "minfer" / "models")
    a = ap.parse_args()
    for d in a.golden_dirs:
        write_exact(d, a.models, a.only_full_logits, a.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
