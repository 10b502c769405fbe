"""Stage 17 tests: reranking on `minfer serve` with a cross-encoder — the tiny
BertForSequenceClassification "bertcls" of tests/apps/hf_checkpoint.py converted with
`minfer convert --keep-pooler` — over plain HTTP (no official client speaks llama-server's
/v1/rerank: Cohere's client calls /v2/rerank with another response shape). The four
routes answer llama-server's shape with results sorted by score, highest first; each
relevance_score equals transformers' logit for the pair (tests/data/rerank, within 1e-4)
and the score `minfer embed --pooling rank` prints, bit for bit; top_n and
return_documents; bad input 4xx with the server healthy after; /v1/embeddings refused
on a cross-encoder, /v1/rerank refused on an embedding model."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, Server

TESTDATA = Path(__file__).resolve().parents[1] / "data"
REF = json.loads((TESTDATA / "rerank" / "bertcls-reference.json").read_text())["pairs"]
QUERY = REF[0]["query"]
DOCS = [p["document"] for p in REF if p["query"] == QUERY]
TOL_LOGIT = 1e-4

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apps"))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("numpy", reason="numpy is needed to write the test checkpoint")
    pytest.importorskip("safetensors", reason="safetensors is needed to write the test checkpoint")
    import hf_checkpoint
    root = tmp_path_factory.mktemp("rerank")
    out = {}
    for name, extra in (("bertcls", ["--keep-pooler"]), ("bert", [])):
        hf = hf_checkpoint.write(name, root / name, TESTDATA / "tokenizers")
        gg = root / f"{name}.gguf"
        r = subprocess.run([BIN, "convert", str(hf), str(gg), "--outtype", "f32", *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[name] = gg
    return out


@pytest.fixture(scope="module")
def srv(models):
    s = Server("--reranking", "--slots", 4, "-t", 2, model=models["bertcls"])
    yield s
    s.kill()


def ref_logit(doc):
    return next(p["logits"][0] for p in REF if p["query"] == QUERY and p["document"] == doc)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"])
def test_routes_sort_by_transformers_scores(srv, path):
    status, r = srv.post(path, {"model": "m", "query": QUERY, "documents": DOCS})
    assert status == 200, r
    assert r["object"] == "list" and r["model"] == "m"
    assert set(r["usage"]) == {"prompt_tokens", "total_tokens"}
    assert r["usage"]["prompt_tokens"] == r["usage"]["total_tokens"] > 0
    res = r["results"]
    assert sorted(x["index"] for x in res) == list(range(len(DOCS)))
    scores = [x["relevance_score"] for x in res]
    assert scores == sorted(scores, reverse=True)
    for x in res:
        assert set(x) == {"index", "relevance_score"}
        assert abs(x["relevance_score"] - ref_logit(DOCS[x["index"]])) < TOL_LOGIT


def test_scores_equal_the_cli_bit_for_bit(srv, models):
    text = "\n".join(f"{QUERY}\t{d}" for d in DOCS)
    r = subprocess.run([BIN, "embed", str(models["bertcls"]), "-p", text, "--embd-output-format",
                        "array"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cli = [row[0] for row in json.loads(r.stdout)]
    res = srv.post("/v1/rerank", {"query": QUERY, "documents": DOCS})[1]["results"]
    for x in res:
        # JSON's shortest round-trip double of the float score, and the CLI's {:.9g}.
        assert float(f"{x['relevance_score']:.9g}") == cli[x["index"]]


def test_top_n_and_return_documents(srv):
    full = srv.post("/v1/rerank", {"query": QUERY, "documents": DOCS})[1]["results"]
    status, r = srv.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2,
                                        "return_documents": True})
    assert status == 200
    assert [x["index"] for x in r["results"]] == [x["index"] for x in full[:2]]
    for x in r["results"]:
        assert x["document"] == {"text": DOCS[x["index"]]}
    big = srv.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 100})[1]
    assert len(big["results"]) == len(DOCS)


BAD = [
    ({"documents": ["a"]}, "'query' is required"),
    ({"query": 3, "documents": ["a"]}, "'query' must be a string"),
    ({"query": "q"}, "'documents' is required"),
    ({"query": "q", "documents": []}, "'documents' must be a non-empty array"),
    ({"query": "q", "documents": "a"}, "'documents' must be a non-empty array"),
    ({"query": "q", "documents": ["a", 7]}, "'documents'[1] must be a string"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "'top_n' must be an integer >= 1"),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, "'top_n' must be an integer >= 1"),
    ({"query": "q", "documents": ["a"], "return_documents": 1}, "'return_documents' must be a boolean"),
    ({"query": "q", "documents": ["a"], "model": 5}, "'model' must be a string"),
    ({"query": "q " * 70, "documents": ["a"]}, "more than the context of 64"),
]


@pytest.mark.parametrize("body,needle", BAD)
def test_bad_input_is_400_and_the_server_stays_healthy(srv, body, needle):
    status, r = srv.post("/v1/rerank", body)
    assert status == 400, r
    assert needle in r["error"]["message"]
    status, _ = srv.request("POST", "/v1/rerank", raw=b"{not json")
    assert status == 400
    assert srv.healthy()


def test_embeddings_on_a_cross_encoder_are_refused(srv):
    for path in ("/v1/embeddings", "/embeddings"):
        status, r = srv.post(path, {"input": "hello"})
        assert status == 400 and "is a cross-encoder" in r["error"]["message"], (path, r)


def test_rerank_on_an_embedding_model_is_refused(models):
    s = Server("--embeddings", "-t", 2, model=models["bert"])
    try:
        status, r = s.post("/v1/rerank", {"query": "q", "documents": ["a"]})
        assert status == 400 and "rerank needs a cross-encoder" in r["error"]["message"], r
    finally:
        s.kill()
    r = subprocess.run([BIN, "serve", str(models["bert"]), "--reranking", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "--reranking needs a cross-encoder" in r.stderr
