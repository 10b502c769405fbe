#!/usr/bin/env python3
"""Node-by-node comparison of one prompt's prefill in llama.cpp and minfer.

llama.cpp side: llama-cpp-python's low-level API with an eval callback (cb_eval) that
copies every contiguous F32 tensor the CPU backend computes. minfer side:
MINFER_GRAPH_DUMP=<dir> (every named F32 node after its kernel). Nodes are matched by
llama.cpp's names (attn_norm-0, Qcur-0, kqv_out-0, ffn_out-0, l_out-0, result_norm,
...); a name that llama.cpp computes more than once (Qcur: mul_mat, bias add, reshape,
rope) is compared against each and the closest is reported. The tail rows are compared
where minfer computes fewer rows (the last layer's n_out reduction).

This is how `--numerics llamacpp` was made bit-identical: the first node that differs
is the op whose arithmetic differs.

usage: compare_intermediates.py MODEL.gguf "prompt text" [--layers N] [-- minfer flags]
  e.g. compare_intermediates.py ~/.cache/minfer/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
         "The capital of France is" -- --numerics llamacpp-norepack
  with llama.cpp's default CPU_REPACK buffer (LLAMA_CPP_LIB_PATH to the reference build):
       compare_intermediates.py --extra-bufts MODEL.gguf "text" -- --numerics llamacpp
Needs llama-cpp-python (LLAMA_CPP_LIB_PATH to use another libllama build, as
make_goldens.sh does) and a built minfer (MINFER_BIN, default build/ci/apps/minfer/minfer).
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


class GgmlTensor(ctypes.Structure):  # ggml.h, struct ggml_tensor
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def llamacpp_tensors(model: str, text: str, threads: int, extra_bufts: bool = False) -> tuple[dict[str, list[np.ndarray]], np.ndarray]:
    import llama_cpp as L

    seen: dict[str, list[np.ndarray]] = {}

    def cb(ptr, ask, _user):
        if ask:
            return True
        t = ctypes.cast(ptr, ctypes.POINTER(GgmlTensor)).contents
        ne, nb = list(t.ne), list(t.nb)
        contiguous = nb[0] == 4 and nb[1] == 4 * ne[0] and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2]
        if t.type == 0 and contiguous and t.data:  # GGML_TYPE_F32
            n = ne[0] * ne[1] * ne[2] * ne[3]
            a = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_float)), shape=(n,))
            seen.setdefault(t.name.decode(), []).append(a.copy())
        return True

    callback = L.ggml_backend_sched_eval_callback(cb)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    # off: as the top-level goldens (plain ggml CPU kernels, compare with --numerics
    # llamacpp-norepack); --extra-bufts: llama.cpp's default (CPU_REPACK; --numerics llamacpp)
    mp.use_extra_bufts = extra_bufts
    m = L.llama_model_load_from_file(model.encode(), mp)
    if not m:
        sys.exit(f"cannot load {model}")
    vocab = L.llama_model_get_vocab(m)
    p = L.llama_context_default_params()
    p.n_ctx, p.n_threads, p.n_threads_batch, p.n_batch, p.n_ubatch = 4096, threads, threads, 2048, 512
    p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_AUTO
    p.cb_eval = callback
    ctx = L.llama_init_from_model(m, p)
    buf = (L.llama_token * 4096)()
    raw = text.encode()
    n = L.llama_tokenize(vocab, raw, len(raw), buf, 4096, True, True)
    if L.llama_decode(ctx, L.llama_batch_get_one(buf, n)) != 0:
        sys.exit("llama_decode failed")
    n_vocab = L.llama_vocab_n_tokens(vocab)
    logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()
    return seen, logits


def minfer_tensors(model: str, text: str, threads: int, flags: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    binary = os.environ.get("MINFER_BIN", "build/ci/apps/minfer/minfer")
    with tempfile.TemporaryDirectory() as d:
        dump = Path(d) / "nodes"
        dump.mkdir()
        r = subprocess.run([binary, model, text, "--no-template", "--temp", "0", "-n", "1", "-t", str(threads),
                            "--dump-logits", f"{d}/logits.f32", *flags],
                           env={**os.environ, "MINFER_GRAPH_DUMP": str(dump)}, capture_output=True)
        if r.returncode != 0:
            sys.exit(r.stderr.decode(errors="replace")[-2000:])
        nodes = {}
        for f in sorted(glob.glob(f"{dump}/*.f32")):
            nodes.setdefault(Path(f).stem.split("_", 1)[1], np.fromfile(f, "<f4"))  # first execute
        return nodes, np.fromfile(f"{d}/logits.f32", "<f4")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--extra-bufts", action="store_true",
                    help="llama.cpp's default extra CPU buffers (CPU_REPACK); the library must have them "
                         "without faulting (LLAMA_CPP_LIB_PATH, as make_repack_goldens.sh)")
    ap.add_argument("flags", nargs="*", help="extra minfer flags (after --)")
    a = ap.parse_args()
    ref, ref_logits = llamacpp_tensors(a.model, a.text, a.threads, a.extra_bufts)
    ours, our_logits = minfer_tensors(a.model, a.text, a.threads, a.flags)
    first_bad = None
    for name, mine in ours.items():
        cands = [t for t in ref.get(name, []) if t.size >= mine.size]
        if not cands:
            continue
        best = min(((int(np.sum(mine != t[-mine.size:])), float(np.max(np.abs(mine.astype(np.float64) - t[-mine.size:]))))
                    for t in cands))
        status = "exact" if best[0] == 0 else f"{best[0]}/{mine.size} differ, max |d| {best[1]:.3g}"
        print(f"{name:24s} {status}")
        if best[0] and first_bad is None:
            first_bad = name
    n = min(len(our_logits), len(ref_logits))
    diff = int(np.sum(our_logits[:n] != ref_logits[:n]))
    print(f"{'logits':24s} {'exact' if diff == 0 else f'{diff}/{n} differ'}")
    print(f"first differing node: {first_bad or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
