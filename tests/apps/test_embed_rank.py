"""Cross-encoder scores (pooling rank): the tiny BertForSequenceClassification "bertcls"
of hf_checkpoint.py, converted with `minfer convert --keep-pooler`, scores each (query,
document) pair as transformers' AutoModelForSequenceClassification does (logits recorded
by tools/reference/rerank_reference.py in tests/data/rerank/bertcls-reference.json)
within 1e-4; the document's token type (1) is read (all-zero types give other scores,
also recorded); a pair's score is bit-identical alone or batched with others, whatever
the batch size; `minfer embed --pooling rank` prints llama-embedding's "rerank score N"
lines (one per label, with it, for a head of several outputs); bad input is a clear
error."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MINFER = os.environ.get("MINFER_BIN", "minfer")
TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", "tests/data"))
REF = json.loads((TESTDATA / "rerank" / "bertcls-reference.json").read_text())
PAIRS = REF["pairs"]
TOL_LOGIT = 1e-4

sys.path.insert(0, str(Path(__file__).parent))


def run(*args):
    return subprocess.run([MINFER, *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("numpy", reason="numpy is needed to write the test checkpoint")
    pytest.importorskip("safetensors", reason="safetensors is needed to write the test checkpoint")
    import hf_checkpoint
    root = tmp_path_factory.mktemp("rerank")
    hf = hf_checkpoint.write("bertcls", root / "bertcls", TESTDATA / "tokenizers")
    out = {}
    for name, extra in (("pooler", ["--keep-pooler"]), ("llamacpp", [])):
        gg = root / f"bertcls-{name}.gguf"
        r = run("convert", hf, gg, "--outtype", "f32", *extra)
        assert r.returncode == 0, r.stderr
        out[name] = gg
    emb = root / "bert"
    hf_checkpoint.write("bert", emb, TESTDATA / "tokenizers")
    r = run("convert", emb, root / "bert.gguf", "--outtype", "f32")
    assert r.returncode == 0, r.stderr
    out["embedding"] = root / "bert.gguf"
    return out


def scores(model, pairs, *flags):
    text = "\n".join(f"{p['query']}\t{p['document']}" for p in pairs)
    r = run("embed", model, "-p", text, "--embd-output-format", "array", "-t", "2", *flags)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_scores_equal_transformers_logits_within_1e_4(models):
    got = scores(models["pooler"], PAIRS)
    assert len(got) == len(PAIRS)
    for p, s in zip(PAIRS, got):
        assert len(s) == 1
        assert abs(s[0] - p["logits"][0]) < TOL_LOGIT, (p["document"], s[0], p["logits"][0])


def test_document_token_types_are_read(models):
    """Segment 0 everywhere (what llama.cpp feeds) scores differently in transformers;
    ours equals the typed logits, so the all-zero ones are far from it."""
    got = scores(models["pooler"], PAIRS)
    far = [abs(s[0] - p["logits_all_type0"][0]) for p, s in zip(PAIRS, got)]
    assert max(far) > 20 * TOL_LOGIT, far


def test_pair_score_is_bitwise_the_same_alone_or_batched(models):
    together = scores(models["pooler"], PAIRS)
    small_batches = scores(models["pooler"], PAIRS, "-b", "40")
    assert small_batches == together
    for i, p in enumerate(PAIRS):
        assert scores(models["pooler"], [p]) == [together[i]], p["document"]


def test_without_the_pooler_llamacpps_file_scores_without_dense_tanh(models):
    """The file llama.cpp's converter writes has no pooler: its scores are the
    classifier on the raw [CLS] state, not transformers' (the reason for --keep-pooler)."""
    got = scores(models["llamacpp"], PAIRS)
    assert max(abs(s[0] - p["logits"][0]) for p, s in zip(PAIRS, got)) > 20 * TOL_LOGIT


def test_cli_prints_llama_embeddings_rerank_score_lines(models):
    text = "\n".join(f"{p['query']}\t{p['document']}" for p in PAIRS[:3])
    r = run("embed", models["pooler"], "-p", text, "--pooling", "rank", "-t", "2")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l]
    want = [f"rerank score {i}: {p['logits'][0]:8.3f}" for i, p in enumerate(PAIRS[:3])]
    assert lines == want


def test_cls_separator_flag_splits_the_pair(models):
    p = PAIRS[0]
    r = run("embed", models["pooler"], f"{p['query']} ||| {p['document']}", "--cls-separator", " ||| ",
            "--embd-output-format", "array")
    assert r.returncode == 0, r.stderr
    assert abs(json.loads(r.stdout)[0][0] - p["logits"][0]) < TOL_LOGIT


def test_bad_rank_inputs_are_clear_errors(models):
    cases = [
        ((models["pooler"], "a\tb", "--pooling", "mean"), "is a cross-encoder"),
        ((models["embedding"], "a\tb", "--pooling", "rank"), "pooling 'rank' needs a cross-encoder"),
        ((models["pooler"], "a\tb\tc"), "input 0 has more than one --cls-separator"),
        ((models["pooler"], "a\tb", "--cls-separator", ""), "--cls-separator is empty"),
    ]
    for args, needle in cases:
        r = run("embed", *args)
        assert r.returncode == 1, (args, r.stdout)
        assert "minfer: error:" in r.stderr and needle in r.stderr, (args, r.stderr)


def test_a_head_of_three_labels_prints_a_labelled_line_per_score(models, tmp_path):
    """id2label of three and a 3-row classifier: three scores per pair, each line with
    its label, as llama-embedding prints them; the same floats as the array output."""
    import shutil
    import numpy as np
    from safetensors.numpy import load_file, save_file
    import hf_checkpoint
    hf = hf_checkpoint.write("bertcls", tmp_path / "three", TESTDATA / "tokenizers")
    cfg = json.loads((hf / "config.json").read_text())
    cfg["id2label"] = {"0": "neg", "1": "neu", "2": "pos"}
    cfg["label2id"] = {"neg": 0, "neu": 1, "pos": 2}
    (hf / "config.json").write_text(json.dumps(cfg))
    w = load_file(str(hf / "model.safetensors"))
    rng = np.random.default_rng(7)
    w["classifier.weight"] = (rng.standard_normal((3, 32)) * 0.3).astype(np.float32)
    w["classifier.bias"] = np.array([0.5, -0.25, 0.125], np.float32)
    save_file(w, str(hf / "model.safetensors"), metadata={"format": "pt"})
    gg = tmp_path / "three.gguf"
    r = run("convert", hf, gg, "--outtype", "f32", "--keep-pooler")
    assert r.returncode == 0, r.stderr
    text = "\n".join(f"{p['query']}\t{p['document']}" for p in PAIRS[:2])
    arr = scores(gg, PAIRS[:2])
    assert [len(s) for s in arr] == [3, 3] and arr[0] != arr[1]
    r = run("embed", gg, "-p", text, "-t", "2")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l]
    want = [f"rerank score {j}: {arr[j][i]:8.3f} [{label}]"
            for j in range(2) for i, label in enumerate(["neg", "neu", "pos"])]
    assert lines == want
