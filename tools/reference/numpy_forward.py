#!/usr/bin/env python3
"""A plain numpy forward pass for F32 qwen2/llama GGUFs (the fixture models): a second,
independent oracle that reads top to bottom, for debugging an engine layer by layer.
It is not the golden reference (llama.cpp is); on F32 models it agrees with llama.cpp
up to llama.cpp's f16 KV cache and f16 flash attention.

usage: numpy_forward.py MODEL.gguf ID [ID ...] [--n-predict N]  → greedy ids and top logits
"""
import argparse

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("ids", type=int, nargs="+")
    ap.add_argument("--n-predict", type=int, default=16)
    a = ap.parse_args()
    r = gguf.GGUFReader(a.model)
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    arch = kv["general.architecture"]
    W = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}
    assert all(t.tensor_type.name == "F32" for t in r.tensors), "F32 models only"
    n_layer, n_head = kv[f"{arch}.block_count"], kv[f"{arch}.attention.head_count"]
    n_head_kv, eps = kv[f"{arch}.attention.head_count_kv"], kv[f"{arch}.attention.layer_norm_rms_epsilon"]
    base = kv[f"{arch}.rope.freq_base"]
    emb = W["token_embd.weight"]                      # [n_vocab, n_embd]
    out_w = W.get("output.weight", emb)
    d = W["blk.0.attn_q.weight"].shape[0] // n_head   # head dim
    neox = arch == "qwen2"                            # llama.cpp: qwen2 NEOX, llama NORM

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, pos):                                 # x [T, H, d]
        inv = base ** (-np.arange(0, d, 2) / d)      # [d/2]
        ang = pos[:, None] * inv[None, :]            # [T, d/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if neox:
            x0, x1 = x[..., : d // 2], x[..., d // 2:]
            return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2], y[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
        return y

    def forward(ids):
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        x = emb[ids]                                  # [T, n_embd]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for il in range(n_layer):
            p = f"blk.{il}."
            h = norm(x, W[p + "attn_norm.weight"])
            q = h @ W[p + "attn_q.weight"].T + W.get(p + "attn_q.bias", 0)
            k = h @ W[p + "attn_k.weight"].T + W.get(p + "attn_k.bias", 0)
            v = h @ W[p + "attn_v.weight"].T + W.get(p + "attn_v.bias", 0)
            q = rope(q.reshape(T, n_head, d), pos)
            k = rope(k.reshape(T, n_head_kv, d), pos)
            v = v.reshape(T, n_head_kv, d)
            g = n_head // n_head_kv
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(d) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("htu,uhd->thd", s, v).reshape(T, n_head * d)
            x = x + o @ W[p + "attn_output.weight"].T
            h = norm(x, W[p + "ffn_norm.weight"])
            gt, up = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
            x = x + (gt / (1 + np.exp(-gt)) * up) @ W[p + "ffn_down.weight"].T
        return norm(x[-1], W["output_norm.weight"]) @ out_w.T

    ids = list(a.ids)
    for _ in range(a.n_predict):
        lg = forward(ids)
        top = np.argsort(-lg, kind="stable")[:3]
        print(int(top[0]), " ".join(f"{int(i)}:{lg[i]:.4f}" for i in top), f"std {lg.std():.3f}")
        ids.append(int(top[0]))


if __name__ == "__main__":
    main()
