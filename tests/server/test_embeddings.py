"""Stage 17 tests: embeddings on `minfer serve` with a real encoder (all-MiniLM-L6-v2,
converted by scripts/setup.sh), driven by the official `openai` and `ollama` clients —
vectors agree with sentence-transformers' own (tests/data/embed, cosine >= 0.99999),
token-id inputs equal text inputs, base64 decodes to the float vectors, Ollama's
/api/embed equals /v1/embeddings bit for bit, concurrent requests get the vectors each
gets alone (inputs of several requests share decodes), llama-server's /embeddings shape
with pooling none, truncation only when asked, generating routes refused with a reason,
and 20 kinds of bad input answered 4xx with the server healthy after."""
import base64
import json
import math
import struct
import threading
from pathlib import Path

import pytest

from conftest import CACHE, Server

openai = pytest.importorskip("openai")
ollama = pytest.importorskip("ollama")

EMBED_MODEL = CACHE / "models" / "all-MiniLM-L6-v2-f32.gguf"
REF = json.loads((Path(__file__).resolve().parents[1] / "data" / "embed" /
                  "minilm-reference.json").read_text(encoding="utf-8"))["cases"]


@pytest.fixture(scope="module")
def srv():
    if not EMBED_MODEL.exists():
        pytest.skip(f"{EMBED_MODEL} not present (scripts/setup.sh)")
    s = Server("--embeddings", "--slots", 4, "-t", 2, model=EMBED_MODEL)
    yield s
    s.kill()


def oai(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_openai_client_vectors_match_sentence_transformers(srv):
    cases = REF[:24] + REF[-2:]  # short, multilingual, code, and two 512-token inputs
    r = oai(srv).embeddings.create(model="all-MiniLM-L6-v2", input=[c["text"] for c in cases])
    assert len(r.data) == len(cases)
    assert [d.index for d in r.data] == list(range(len(cases)))
    for d, c in zip(r.data, cases):
        assert len(d.embedding) == 384
        assert cosine(d.embedding, c["embedding"]) >= 0.99999, c["text"]
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1.0) < 1e-5
    assert r.usage.prompt_tokens == sum(len(c["ids"]) for c in cases)
    assert r.usage.total_tokens == r.usage.prompt_tokens
    assert r.model == "all-MiniLM-L6-v2"


def test_token_ids_equal_text_and_base64_decodes_to_the_floats(srv):
    c = REF[1]
    by_text = srv.post("/v1/embeddings", {"input": c["text"]})[1]["data"][0]["embedding"]
    by_ids = srv.post("/v1/embeddings", {"input": c["ids"]})[1]["data"][0]["embedding"]
    by_ids2 = srv.post("/v1/embeddings", {"input": [c["ids"], REF[2]["ids"]]})[1]["data"]
    assert by_text == by_ids == by_ids2[0]["embedding"]
    status, b64 = srv.post("/v1/embeddings", {"input": c["text"], "encoding_format": "base64"})
    assert status == 200
    raw = base64.b64decode(b64["data"][0]["embedding"])
    floats = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    assert floats == [struct.unpack("<f", struct.pack("<f", x))[0] for x in by_text]
    # The openai client asks for base64 by default and decodes it itself.
    assert oai(srv).embeddings.create(model="m", input=c["text"]).data[0].embedding == floats


def test_ollama_embed_equals_v1_embeddings_bit_for_bit(srv):
    texts = [REF[0]["text"], REF[5]["text"], REF[13]["text"]]
    o = ollama.Client(host=srv.url, timeout=120).embed(model=model_id(srv), input=texts)
    v1 = srv.post("/v1/embeddings", {"input": texts})[1]["data"]
    assert [list(e) for e in o.embeddings] == [d["embedding"] for d in v1]
    assert o.prompt_eval_count == sum(len(REF[i]["ids"]) for i in (0, 5, 13))
    one = ollama.Client(host=srv.url, timeout=120).embed(model=model_id(srv), input=texts[0])
    assert list(one.embeddings[0]) == v1[0]["embedding"]
    # The older /api/embeddings: one prompt, the pooled vector before normalisation.
    status, legacy = srv.post("/api/embeddings", {"model": model_id(srv), "prompt": texts[0]})
    assert status == 200
    norm = math.sqrt(sum(x * x for x in legacy["embedding"]))
    assert norm > 0 and abs(norm - 1.0) > 1e-3
    assert cosine(legacy["embedding"], v1[0]["embedding"]) > 0.999999


def model_id(s):
    status, body = s.request("GET", "/v1/models")
    assert status == 200
    return json.loads(body)["data"][0]["id"]


def test_concurrent_requests_get_the_vectors_each_gets_alone(srv):
    inputs = [[REF[i]["text"], REF[i + 40]["text"]] for i in range(8)]
    alone = [srv.post("/v1/embeddings", {"input": x})[1]["data"] for x in inputs]
    got = [None] * len(inputs)

    def run(i):
        got[i] = srv.post("/v1/embeddings", {"input": inputs[i]})[1]["data"]

    for _ in range(3):
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == alone


def test_llama_server_embeddings_route_and_pooling_none(srv, make_server):
    status, body = srv.post("/embeddings", {"content": REF[1]["text"]})
    assert status == 200
    assert body[0]["index"] == 0 and len(body[0]["embedding"]) == 1
    v1 = srv.post("/v1/embeddings", {"input": REF[1]["text"]})[1]["data"][0]["embedding"]
    assert body[0]["embedding"][0] == v1
    none = make_server("--pooling", "none", "-t", 2, model=EMBED_MODEL)
    status, body = none.post("/embeddings", {"content": REF[1]["text"]})
    assert status == 200
    rows = body[0]["embedding"]
    assert len(rows) == len(REF[1]["ids"]) and all(len(r) == 384 for r in rows)
    assert all(abs(math.sqrt(sum(x * x for x in r)) - 1.0) < 1e-5 for r in rows)
    status, err = none.post("/v1/embeddings", {"input": "x"})
    assert status == 400 and "pooling 'none'" in err["error"]["message"]


def test_long_inputs_are_refused_naming_them_unless_truncation_is_asked(srv):
    long_text = REF[-1]["text"] + " " + REF[-2]["text"]
    status, err = srv.post("/v1/embeddings", {"input": ["short", long_text]})
    assert status == 400
    assert "'input'[1] has" in err["error"]["message"] and "512" in err["error"]["message"]
    status, ok = srv.post("/v1/embeddings", {"input": ["short", long_text], "truncate": True})
    assert status == 200 and ok["usage"]["prompt_tokens"] == 3 + 512
    # Ollama truncates by default, and refuses with truncate false.
    status, ok = srv.post("/api/embed", {"model": model_id(srv), "input": long_text})
    assert status == 200 and ok["prompt_eval_count"] == 512
    status, err = srv.post("/api/embed", {"model": model_id(srv), "input": long_text,
                                          "truncate": False})
    assert status == 400 and "has" in err["error"]


def test_generating_routes_on_an_embedding_model_say_why(srv):
    for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"}),
                       ("/v1/messages", {"model": "m", "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "hi"}]}),
                       ("/api/generate", {"model": model_id(srv), "prompt": "hi"})]:
        status, err = srv.post(path, body)
        assert status == 400, path
        assert "embedding model" in json.dumps(err), path


BAD = [
    ("/v1/embeddings", b"{not json"),
    ("/v1/embeddings", b"[]"),
    ("/v1/embeddings", {}),
    ("/v1/embeddings", {"input": None}),
    ("/v1/embeddings", {"input": 42}),
    ("/v1/embeddings", {"input": []}),
    ("/v1/embeddings", {"input": [[]]}),
    ("/v1/embeddings", {"input": ["ok", 3.5]}),
    ("/v1/embeddings", {"input": ["ok", {"text": "x"}]}),
    ("/v1/embeddings", {"input": [1, 2, 99999999]}),
    ("/v1/embeddings", {"input": [[101, -5, 102]]}),
    ("/v1/embeddings", {"input": [101, "x"]}),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}),
    ("/v1/embeddings", {"input": "x", "dimensions": 128}),
    ("/v1/embeddings", {"input": "x", "model": 7}),
    ("/v1/embeddings", {"input": "x", "truncate": "yes"}),
    ("/v1/embeddings", {"input": "x", "embd_normalize": "2"}),
    ("/v1/embeddings", {"input": ["x"] * 2049}),
    ("/api/embed", {"model": "other-model", "input": "x"}),
    ("/api/embed", {"model": "MODEL", "input": [1, 2]}),
    ("/api/embeddings", {"model": "MODEL", "prompt": ["a"]}),
    ("/embeddings", {"content": 5}),
]


@pytest.mark.parametrize("path,body", BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_input_is_4xx_and_the_server_stays_healthy(srv, path, body):
    if isinstance(body, dict) and body.get("model") == "MODEL":
        body = {**body, "model": model_id(srv)}
    raw = body if isinstance(body, bytes) else None
    status, data = srv.request("POST", path, None if raw else body, raw=raw)
    assert 400 <= status < 500, (status, data)
    assert data  # an error body in the route's dialect
    assert srv.healthy()
