#!/usr/bin/env python3
"""A plain numpy forward pass in f64 for llama/qwen2/qwen3/gemma3/phi3/qwen3moe GGUFs: an independent oracle that
reads top to bottom, for debugging an engine layer by layer and for the exact logits of
the goldens (tools/reference/exact_logits.py).

F32 weights are used as stored. With --dequantize (or dequantize=True) any weight type
is expanded through gguf.quants.dequantize, which reproduces ggml's dequantization bit
for bit; everything after that (activations, KV, attention, norms) is f64 with no
rounding to f16 or to quantized activation blocks. The result is the exact math of the
model as stored, which neither llama.cpp nor minfer computes: both are compared with it.

usage: numpy_forward.py MODEL.gguf ID [ID ...] [--n-predict N] [--dequantize]
       → greedy ids and top logits
"""
from __future__ import annotations

import argparse

import gguf
import numpy as np


class Model:
    """Weights of one GGUF in f64; forward(ids) → f64 logits of the last position."""

    def __init__(self, path: str, dequantize: bool = False):
        r = gguf.GGUFReader(path)
        kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
        arch = self.arch = kv["general.architecture"]
        assert arch in ("llama", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe"), f"{arch}: not implemented here"
        if not dequantize:
            bad = [t.name for t in r.tensors if t.tensor_type.name != "F32"]
            assert not bad, f"F32 models only without --dequantize ({bad[0]} is not F32)"
        from gguf.quants import dequantize as deq
        # GGUF shapes are ggml ne (innermost first); numpy wants them reversed.
        self.W = {t.name: deq(t.data, t.tensor_type).astype(np.float64)
                  .reshape([int(x) for x in reversed(t.shape)]) for t in r.tensors}
        self.n_layer, self.n_head = kv[f"{arch}.block_count"], kv[f"{arch}.attention.head_count"]
        if arch == "phi3":  # fused tensors: attn_qkv = Q | K | V rows, ffn_up = gate | up rows
            n_q = self.n_head * kv[f"{arch}.embedding_length"] // self.n_head
            n_ff = kv[f"{arch}.feed_forward_length"]
            for il in range(self.n_layer):
                p = f"blk.{il}."
                qkv = self.W.pop(p + "attn_qkv.weight")
                n_kv = (qkv.shape[0] - n_q) // 2
                self.W[p + "attn_q.weight"], self.W[p + "attn_k.weight"], self.W[p + "attn_v.weight"] = (
                    qkv[:n_q], qkv[n_q:n_q + n_kv], qkv[n_q + n_kv:])
                up = self.W.pop(p + "ffn_up.weight")
                self.W[p + "ffn_gate.weight"], self.W[p + "ffn_up.weight"] = up[:n_ff], up[n_ff:]
        self.n_head_kv = kv[f"{arch}.attention.head_count_kv"]
        self.n_expert_used = kv.get(f"{arch}.expert_used_count", 0)  # qwen3moe
        self.eps = kv[f"{arch}.attention.layer_norm_rms_epsilon"]
        self.base = kv.get(f"{arch}.rope.freq_base", 10000.0)
        self.emb = self.W["token_embd.weight"]                 # [n_vocab, n_embd]
        self.out_w = self.W.get("output.weight", self.emb)      # tied when absent
        self.d = self.W["blk.0.attn_q.weight"].shape[0] // self.n_head  # head dim
        self.neox = arch != "llama"                             # llama.cpp: llama NORM, the others NEOX
        # Gemma 3: sliding-window layers (every 6th global, llama.cpp's default pattern)
        # with their own rope base; embeddings scaled by sqrt(n_embd); Q scaled by
        # 1/sqrt(head dim); GeGLU with the tanh gelu; norms stored as 1 + w (as used).
        self.gemma = arch == "gemma3"
        self.n_swa = kv.get(f"{arch}.attention.sliding_window", 0) if self.gemma else 0
        self.base_swa = kv.get(f"{arch}.rope.freq_base_swa", 10000.0)
        self.is_swa = [self.n_swa > 0 and il % 6 < 5 for il in range(self.n_layer)]

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, base=None):                          # x [T, H, d]
        d = self.d
        inv = (base or self.base) ** (-np.arange(0, d, 2) / d)  # [d/2]
        ang = pos[:, None] * inv[None, :]                       # [T, d/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if self.neox:
            x0, x1 = x[..., : d // 2], x[..., d // 2:]
            return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2], y[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
        return y

    def forward(self, ids) -> np.ndarray:
        W, d, n_head, n_head_kv = self.W, self.d, self.n_head, self.n_head_kv
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        x = self.emb[list(ids)]                                 # [T, n_embd]
        if self.gemma:
            x = x * np.sqrt(x.shape[1])
        mask = np.triu(np.full((T, T), -np.inf), 1)
        ti, tj = np.arange(T)[:, None], np.arange(T)[None, :]
        swa_mask = np.where(ti - tj >= max(self.n_swa, 1), -np.inf, 0.0) + mask
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.norm(x, W[p + "attn_norm.weight"])
            q = h @ W[p + "attn_q.weight"].T + W.get(p + "attn_q.bias", 0)
            k = h @ W[p + "attn_k.weight"].T + W.get(p + "attn_k.bias", 0)
            v = h @ W[p + "attn_v.weight"].T + W.get(p + "attn_v.bias", 0)
            q, k = q.reshape(T, n_head, d), k.reshape(T, n_head_kv, d)
            if p + "attn_q_norm.weight" in W:                  # QK-norm (qwen3, gemma3)
                q = self.norm(q, W[p + "attn_q_norm.weight"])
                k = self.norm(k, W[p + "attn_k_norm.weight"])
            base = self.base_swa if self.is_swa[il] else self.base
            q = self.rope(q, pos, base)
            k = self.rope(k, pos, base)
            v = v.reshape(T, n_head_kv, d)
            g = n_head // n_head_kv
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            m = swa_mask if self.is_swa[il] else mask
            s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(d) + m
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("htu,uhd->thd", s, v).reshape(T, n_head * d)
            a = o @ W[p + "attn_output.weight"].T
            if self.gemma:
                a = self.norm(a, W[p + "post_attention_norm.weight"])
            x = x + a
            h = self.norm(x, W[p + "ffn_norm.weight"])
            if p + "ffn_gate_inp.weight" in W:                 # mixture of experts (qwen3moe)
                x = x + self.moe(h, p)
                continue
            gt, up = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
            if self.gemma:
                act = 0.5 * gt * (1 + np.tanh(np.sqrt(2 / np.pi) * (gt + 0.044715 * gt ** 3)))
                f = self.norm((act * up) @ W[p + "ffn_down.weight"].T, W[p + "post_ffw_norm.weight"])
            else:
                f = (gt / (1 + np.exp(-gt)) * up) @ W[p + "ffn_down.weight"].T
            x = x + f
        return self.norm(x[-1], W["output_norm.weight"]) @ self.out_w.T


    def moe(self, h, p):
        """llama.cpp's build_moe_ffn for qwen3moe: softmax router, the n_expert_used most
        probable experts (ties to the lower id), their probabilities normalised to sum 1
        (the sum clamped below at 2^-14), SwiGLU experts, the weighted sum."""
        W = self.W
        lg = h @ W[p + "ffn_gate_inp.weight"].T                # [T, n_expert]
        pr = np.exp(lg - lg.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        gate, up, down = (W[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            sel = np.argsort(-pr[t], kind="stable")[:self.n_expert_used]
            w = pr[t, sel] / max(pr[t, sel].sum(), 2.0 ** -14)
            for e, we in zip(sel, w):
                gt, u = gate[e] @ h[t], up[e] @ h[t]           # [n_ff_exp]
                out[t] += we * (down[e] @ (gt / (1 + np.exp(-gt)) * u))
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("ids", type=int, nargs="+")
    ap.add_argument("--n-predict", type=int, default=16)
    ap.add_argument("--dequantize", action="store_true", help="any weight type, via gguf.quants.dequantize")
    a = ap.parse_args()
    m = Model(a.model, dequantize=a.dequantize)
    ids = list(a.ids)
    for _ in range(a.n_predict):
        lg = m.forward(ids)
        top = np.argsort(-lg, kind="stable")[:3]
        print(int(top[0]), " ".join(f"{int(i)}:{lg[i]:.4f}" for i in top), f"std {lg.std():.3f}")
        ids.append(int(top[0]))


if __name__ == "__main__":
    main()
