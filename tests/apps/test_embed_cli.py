"""`minfer embed` on all-MiniLM-L6-v2 (converted by tools/make_test_models.sh): the json
vectors agree with sentence-transformers' (tests/data/embed, cosine >= 0.99999) and are
unit vectors; the array, raw and json+ formats carry the same numbers; the default text
output has an `embedding N:` line per input and the cosine matrix; -f inputs split at
--embd-separator; --pooling none prints a vector per token; --embd-normalize 0 prints
integers up to 32760; errors (a generative model, an input past -c, no input) name
what is wrong and exit 1."""
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

MINFER = os.environ.get("MINFER_BIN", "minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "all-MiniLM-L6-v2-f32.gguf"
LLM = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", Path(__file__).resolve().parents[1] / "data"))
REF = json.loads((TESTDATA / "embed" / "minilm-reference.json").read_text(encoding="utf-8"))["cases"]

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")


def embed(*args, check=True):
    r = subprocess.run([MINFER, "embed", str(MODEL), "-t", "2", *map(str, args)],
                       capture_output=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr.decode()
    return r


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_json_vectors_match_sentence_transformers_and_other_formats_agree():
    texts = [REF[i]["text"] for i in (0, 1, 8, 13, 20)]
    j = json.loads(embed(*texts, "--embd-output-format", "json").stdout)
    assert j["object"] == "list" and [d["index"] for d in j["data"]] == list(range(5))
    for d, i in zip(j["data"], (0, 1, 8, 13, 20)):
        assert len(d["embedding"]) == 384
        assert cosine(d["embedding"], REF[i]["embedding"]) >= 0.99999
        assert abs(math.sqrt(sum(x * x for x in d["embedding"])) - 1) < 1e-5
    arr = json.loads(embed(*texts, "--embd-output-format", "array").stdout)
    assert arr == [d["embedding"] for d in j["data"]]
    raw = embed(*texts, "--embd-output-format", "raw").stdout.decode().splitlines()
    assert [[float(x) for x in line.split()] for line in raw] == arr
    plus = json.loads(embed(*texts, "--embd-output-format", "json+").stdout)
    sim = plus["cosineSimilarity"]
    assert len(sim) == 5 and all(abs(sim[i][i] - 1) < 0.01 for i in range(5))


def test_default_output_lines_cosine_matrix_and_file_inputs(tmp_path):
    out = embed("Hello world", "The quick brown fox").stdout.decode()
    lines = [l for l in out.splitlines() if l.startswith("embedding ")]
    assert len(lines) == 2 and len(lines[0].split()[2:]) == 16
    assert "cosine similarity matrix:" in out
    one = embed("Hello world").stdout.decode()
    assert len([l for l in one.splitlines() if l.startswith("embedding 0:")][0].split()[2:]) == 384
    f = tmp_path / "in.txt"
    f.write_text("Hello world\nThe quick brown fox\n")
    from_file = json.loads(embed("-f", f, "--embd-output-format", "array").stdout)
    from_args = json.loads(embed("Hello world", "The quick brown fox",
                                 "--embd-output-format", "array").stdout)
    assert from_file == from_args
    g = tmp_path / "sep.txt"
    g.write_text("Hello world|The quick brown fox")
    assert json.loads(embed("-f", g, "--embd-separator", "|", "--embd-output-format",
                            "array").stdout) == from_args


def test_pooling_none_and_int16_normalisation():
    rows = json.loads(embed("Hello world", "--pooling", "none", "--embd-output-format",
                            "array").stdout)
    assert len(rows) == 4 and all(len(r) == 384 for r in rows)  # [CLS] hello world [SEP]
    ints = json.loads(embed("Hello world", "--embd-normalize", "0", "--embd-output-format",
                            "array").stdout)[0]
    assert all(float(x).is_integer() for x in ints) and max(abs(x) for x in ints) == 32760


def test_errors_name_the_problem():
    r = embed("x" * 10 + " word" * 600, check=False)
    assert r.returncode == 1 and b"input 0 has" in r.stderr and b"512" in r.stderr
    r = embed(check=False)
    assert r.returncode == 1 and b"no input given" in r.stderr
    if LLM.exists():
        r = subprocess.run([MINFER, "embed", str(LLM), "hi"], capture_output=True, timeout=120)
        assert r.returncode == 1 and b"generative model" in r.stderr
        r = subprocess.run([MINFER, str(MODEL), "hi", "-n", "4"], capture_output=True, timeout=120)
        assert r.returncode == 1 and b"embedding model" in r.stderr
