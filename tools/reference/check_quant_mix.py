#!/usr/bin/env python3
"""Checks minfer-model-fixture's per-tensor types against llama.cpp's llama-quantize.

Quantizes SRC (an F16/F32 fixture) with llama.cpp's llama_model_quantize (no imatrix,
default parameters: what `llama-quantize SRC OUT TYPE` does) and compares the type
of every tensor with OURS, the fixture written directly in that type: types and shapes
must agree. From an F32 source the data bytes must agree too (our reference
quantizers are bit-exact with ggml's); from F16 they differ (llama.cpp then quantizes
the f16-rounded weights), and only the count of identical tensors is printed.

usage: check_quant_mix.py SRC.gguf OURS.gguf TYPE   (TYPE: q4_k_m, q4_0, q8_0, ...)
"""
import sys
import tempfile
from pathlib import Path

import gguf
import llama_cpp as L

FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q4_k_s": 14, "q4_k_m": 15,
          "q5_k_m": 17, "q6_k": 18}


def types(path):
    r = gguf.GGUFReader(path)
    return {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape)) for t in r.tensors}


def data(path):
    return {t.name: bytes(t.data.tobytes()) for t in gguf.GGUFReader(path).tensors}


def main():
    src, ours, typ = sys.argv[1], sys.argv[2], sys.argv[3]
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "ref.gguf")
        p = L.llama_model_quantize_default_params()
        p.ftype = FTYPES[typ]
        p.nthread = 2
        rc = L.llama_model_quantize(src.encode(), out.encode(), p)
        assert rc == 0, f"llama_model_quantize returned {rc}"
        ref = types(out)
        ref_data = data(out)
    mine = types(ours)
    mine_data = data(ours)
    same = sum(1 for n in ref_data if mine_data.get(n) == ref_data[n])
    bad = [(n, ref.get(n), mine.get(n)) for n in sorted(set(ref) | set(mine)) if ref.get(n) != mine.get(n)]
    for n, r, m in bad:
        print(f"{n}: llama.cpp {r} ours {m}")
    print(f"{typ}: {len(ref)} tensors, {len(bad)} differ in type or shape; {same} have identical data")
    src_f32 = all(t == "F32" for t, _ in types(src).values())
    return 1 if bad or (src_f32 and same != len(ref)) else 0


if __name__ == "__main__":
    sys.exit(main())
