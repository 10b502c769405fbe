"""Records what transformers computes for the tiny cross-encoder "bertcls" of
tests/apps/hf_checkpoint.py (BertForSequenceClassification, one label), for
tests/apps/test_embed_rank.py and tests/server/test_rerank.py: per (query, document) pair the token ids and token type ids
the `tokenizers` library gives for the pair (no padding: "[CLS] q [SEP] d [SEP]", types
0 then 1) and AutoModelForSequenceClassification's logits (the pooler's dense + tanh on
[CLS], then the classifier), in float64 text. The checkpoint is written with the same
seed the test uses, so the test's `minfer convert --keep-pooler` of it is this model.
  usage: python rerank_reference.py OUT_JSON
  needs: torch, transformers, numpy, safetensors (CI has no torch: the output is kept in
         tests/data/rerank/bertcls-reference.json)"""
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "apps"))
import hf_checkpoint  # noqa: E402

QUERY = "what is the capital of france?"
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog.",
    "France is a country in Western Europe; its capital is Paris.",
    "Berlin is the capital of Germany.",
    "a",
    "Ça va très bien, merci beaucoup!",
]
PAIRS = [(QUERY, d) for d in DOCUMENTS] + [
    ("hello", "world"),
    ("how many legs does a spider have?", "Spiders have eight legs and two body segments."),
]


def main():
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        d = hf_checkpoint.write("bertcls", Path(tmp) / "bertcls", ROOT / "tests" / "data" / "tokenizers")
        tok = AutoTokenizer.from_pretrained(d)
        model = AutoModelForSequenceClassification.from_pretrained(d, torch_dtype=torch.float32).eval()
        rows = []
        with torch.no_grad():
            for q, doc in PAIRS:
                enc = tok(q, doc, return_tensors="pt")
                logits = model(**enc).logits[0].double().tolist()
                rows.append({"query": q, "document": doc,
                             "input_ids": enc["input_ids"][0].tolist(),
                             "token_type_ids": enc["token_type_ids"][0].tolist(),
                             "logits": logits})
                # Segment 0 everywhere (what llama.cpp feeds): shows the types matter.
                enc0 = dict(enc, token_type_ids=torch.zeros_like(enc["token_type_ids"]))
                rows[-1]["logits_all_type0"] = model(**enc0).logits[0].double().tolist()
    import transformers
    doc = {"model": "hf_checkpoint bertcls (seed 1234)", "transformers": transformers.__version__,
           "torch": torch.__version__, "pairs": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
