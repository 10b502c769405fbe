"""Writes tiny Hugging Face checkpoints (config.json, safetensors, tokenizer files) with
deterministic random weights (decoder-only CONFIGS, and BERT_CONFIGS: a
sentence-transformers folder), for `minfer convert`'s test and for
tools/reference/convert_reference.sh, which records what llama.cpp's convert_hf_to_gguf.py
makes of the same directories. Needs numpy and the `safetensors` package (no torch).

The same (name, seed) gives the same bytes on every machine: numpy's PCG64 generator,
float32 values rounded to the stored dtype by numpy."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

# name -> the checkpoint's shape. vocab_size is the tokenizer's padded size.
CONFIGS = {
    # Llama 3 tokenizer, F32 weights, one safetensors file, separate lm_head.
    "llama": dict(arch="LlamaForCausalLM", model_type="llama", tokenizer="llama3", dtype="float32",
                  hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, vocab=128256,
                  rope_theta=500000.0, eps=1e-5, tied=False, shards=1, bias=False, qk_norm=False,
                  bos=128000, eos=128001),
    # Qwen2.5 layout: q/k/v biases, F16 weights in two shards with an index, tied embeddings.
    "qwen2": dict(arch="Qwen2ForCausalLM", model_type="qwen2", tokenizer="qwen3", dtype="float16",
                  hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, vocab=151936,
                  rope_theta=1000000.0, eps=1e-6, tied=True, shards=2, bias=True, qk_norm=False,
                  bos=151643, eos=151645),
    # Qwen3 layout: per-head q/k RMS norms, explicit head_dim, F32, separate lm_head.
    "qwen3": dict(arch="Qwen3ForCausalLM", model_type="qwen3", tokenizer="qwen3", dtype="float32",
                  hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=32, vocab=151936,
                  rope_theta=1000000.0, eps=1e-6, tied=False, shards=1, bias=False, qk_norm=True,
                  bos=151643, eos=151645),
}

# BERT (BertModel) as a sentence-transformers folder: modules.json + 1_Pooling/config.json.
# The tokenizer is the uncased BERT WordPiece vocabulary (all-MiniLM-L6-v2's, 30522 ids):
# llama.cpp's converter names the pre-tokenizer from a fingerprint of the vocabulary and
# refuses one it does not know, so a cut-down vocabulary cannot be recorded.
BERT_CONFIGS = {
    # "bert."-prefixed names with the pooler and position_ids (dropped by the converter),
    # CLS pooling, F32.
    "bert": dict(tokenizer="minilm", dtype="float32", hidden=32, ffn=64, layers=2, heads=4,
                 vocab=30522, n_ctx=64, type_vocab=2, eps=1e-12, prefix="bert.",
                 pooling="pooling_mode_cls_token"),
    # A cross-encoder (the ms-marco MiniLM rerankers' layout): BertForSequenceClassification
    # with one label, "bert."-prefixed names, the pooler and a 1-row "classifier"; no
    # modules.json, so no pooling_type key.
    "bertcls": dict(tokenizer="minilm", dtype="float32", hidden=32, ffn=64, layers=2, heads=4,
                    vocab=30522, n_ctx=64, type_vocab=2, eps=1e-12, prefix="bert.",
                    pooling=None, labels={"0": "LABEL_0"}),
}


def bert_config_json(c):
    extra = {"id2label": c["labels"], "label2id": {v: int(k) for k, v in c["labels"].items()}} \
        if c.get("labels") else {}
    return {
        "architectures": ["BertForSequenceClassification" if c.get("labels") else "BertModel"],
        "model_type": "bert",
        "hidden_size": c["hidden"],
        "intermediate_size": c["ffn"],
        "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"],
        "vocab_size": c["vocab"],
        "max_position_embeddings": c["n_ctx"],
        "type_vocab_size": c["type_vocab"],
        "layer_norm_eps": c["eps"],
        "hidden_act": "gelu",
        "pad_token_id": 0,
        "torch_dtype": c["dtype"],
        **extra,
    }


def bert_tensors(c, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(c["dtype"])
    h, f = c["hidden"], c["ffn"]

    def w(*shape, scale=0.08):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(dt)

    def norm(n):
        return (np.float32(1) + rng.standard_normal(n, dtype=np.float32) * np.float32(0.05)).astype(dt)

    p = c["prefix"]
    out = {
        p + "embeddings.word_embeddings.weight": w(c["vocab"], h, scale=0.5),
        p + "embeddings.position_embeddings.weight": w(c["n_ctx"], h, scale=0.1),
        p + "embeddings.token_type_embeddings.weight": w(c["type_vocab"], h, scale=0.1),
        p + "embeddings.LayerNorm.weight": norm(h),
        p + "embeddings.LayerNorm.bias": w(h, scale=0.02),
        p + "embeddings.position_ids": np.arange(c["n_ctx"], dtype=np.int64)[None, :],
    }
    for i in range(c["layers"]):
        b = f"{p}encoder.layer.{i}."
        for name in ("query", "key", "value"):
            out[b + f"attention.self.{name}.weight"] = w(h, h)
            out[b + f"attention.self.{name}.bias"] = w(h, scale=0.02)
        out[b + "attention.output.dense.weight"] = w(h, h)
        out[b + "attention.output.dense.bias"] = w(h, scale=0.02)
        out[b + "attention.output.LayerNorm.weight"] = norm(h)
        out[b + "attention.output.LayerNorm.bias"] = w(h, scale=0.02)
        out[b + "intermediate.dense.weight"] = w(f, h)
        out[b + "intermediate.dense.bias"] = w(f, scale=0.02)
        out[b + "output.dense.weight"] = w(h, f)
        out[b + "output.dense.bias"] = w(h, scale=0.02)
        out[b + "output.LayerNorm.weight"] = norm(h)
        out[b + "output.LayerNorm.bias"] = w(h, scale=0.02)
    out[p + "pooler.dense.weight"] = w(h, h)
    out[p + "pooler.dense.bias"] = w(h, scale=0.02)
    if c.get("labels"):
        out["classifier.weight"] = w(len(c["labels"]), h, scale=0.3)
        out["classifier.bias"] = w(len(c["labels"]), scale=0.1)
    return out


def write_bert(name, out_dir, tokenizers_dir, seed=1234):
    c = BERT_CONFIGS[name]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(bert_config_json(c), indent=2) + "\n")
    tok = Path(tokenizers_dir) / c["tokenizer"]
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tok / f, out / f)
    save_file(bert_tensors(c, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    if c["pooling"] is None:
        return out
    (out / "1_Pooling").mkdir(parents=True, exist_ok=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    modes = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
             "pooling_mode_mean_sqrt_len_tokens")
    pooling = {"word_embedding_dimension": c["hidden"], **{m: m == c["pooling"] for m in modes}}
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    return out


def config_json(c):
    head_dim = c.get("head_dim", c["hidden"] // c["heads"])
    cfg = {
        "architectures": [c["arch"]],
        "model_type": c["model_type"],
        "hidden_size": c["hidden"],
        "intermediate_size": c["ffn"],
        "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"],
        "vocab_size": c["vocab"],
        "max_position_embeddings": 2048,
        "rms_norm_eps": c["eps"],
        "rope_theta": c["rope_theta"],
        "hidden_act": "silu",
        "tie_word_embeddings": c["tied"],
        "bos_token_id": c["bos"],
        "eos_token_id": c["eos"],
        "torch_dtype": c["dtype"],
    }
    if "head_dim" in c:
        cfg["head_dim"] = head_dim
    return cfg


def tensors(c, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(c["dtype"])
    h, f = c["hidden"], c["ffn"]
    hd = c.get("head_dim", h // c["heads"])
    q, kv = c["heads"] * hd, c["kv_heads"] * hd

    def w(*shape, scale=0.08):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(dt)

    def norm(n):
        return (np.float32(1) + rng.standard_normal(n, dtype=np.float32) * np.float32(0.05)).astype(dt)

    out = {"model.embed_tokens.weight": w(c["vocab"], h, scale=0.5)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = norm(h)
        out[p + "self_attn.q_proj.weight"] = w(q, h)
        out[p + "self_attn.k_proj.weight"] = w(kv, h)
        out[p + "self_attn.v_proj.weight"] = w(kv, h)
        if c["bias"]:
            out[p + "self_attn.q_proj.bias"] = w(q, scale=0.02)
            out[p + "self_attn.k_proj.bias"] = w(kv, scale=0.02)
            out[p + "self_attn.v_proj.bias"] = w(kv, scale=0.02)
        if c["qk_norm"]:
            out[p + "self_attn.q_norm.weight"] = norm(hd)
            out[p + "self_attn.k_norm.weight"] = norm(hd)
        out[p + "self_attn.o_proj.weight"] = w(h, q)
        out[p + "post_attention_layernorm.weight"] = norm(h)
        out[p + "mlp.gate_proj.weight"] = w(f, h)
        out[p + "mlp.up_proj.weight"] = w(f, h)
        out[p + "mlp.down_proj.weight"] = w(h, f)
    out["model.norm.weight"] = norm(h)
    if not c["tied"]:
        out["lm_head.weight"] = w(c["vocab"], h)
    return out


def write(name, out_dir, tokenizers_dir, seed=1234):
    """Writes checkpoint `name` of CONFIGS or BERT_CONFIGS into out_dir (created); returns
    out_dir."""
    if name in BERT_CONFIGS:
        return write_bert(name, out_dir, tokenizers_dir, seed)
    c = CONFIGS[name]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config_json(c), indent=2) + "\n")
    tok = Path(tokenizers_dir) / c["tokenizer"]
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (tok / f).exists():
            shutil.copyfile(tok / f, out / f)
    ts = tensors(c, seed)
    meta = {"format": "pt"}
    if c["shards"] == 1:
        save_file(ts, str(out / "model.safetensors"), metadata=meta)
    else:
        names = list(ts)
        n = c["shards"]
        per = (len(names) + n - 1) // n
        weight_map = {}
        total = 0
        for s in range(n):
            part = names[s * per:(s + 1) * per]
            fname = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
            save_file({k: ts[k] for k in part}, str(out / fname), metadata=meta)
            for k in part:
                weight_map[k] = fname
                total += ts[k].nbytes
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out


if __name__ == "__main__":
    # usage: hf_checkpoint.py NAME OUT_DIR TOKENIZERS_DIR
    write(sys.argv[1], sys.argv[2], sys.argv[3])
