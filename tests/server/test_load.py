"""Stage 17 test: a bounded load — 200 requests from 16 concurrent clients (chat and
completions, streaming and not) on 8 slots with a small queue bound, so requests queue
and slots turn over: 0 errors, every response well-formed (JSON shape, usage, finish
reason, SSE ending in [DONE]), the server idle and healthy afterwards, and a clean exit
on SIGTERM (no leak or sanitizer report when the binary is an ASan build)."""
import json
import threading

from conftest import needs_model

N_REQUESTS = 200
N_CLIENTS = 16


def body_for(i):
    stream = i % 2 == 1
    common = {"max_tokens": 4 + i % 5, "seed": i, "stream": stream}
    if i % 3 == 0:
        return "/v1/completions", {"prompt": f"Item {i}: the weather is", **common}
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": f"Say a word about {i}."}],
                                    **common}


def check(path, body, status, raw):
    assert status == 200, (status, raw[:200])
    chat = path.endswith("chat/completions")
    if not body["stream"]:
        j = json.loads(raw)
        assert j["object"] == ("chat.completion" if chat else "text_completion")
        ch = j["choices"][0]
        assert ch["finish_reason"] in ("stop", "length")
        text = ch["message"]["content"] if chat else ch["text"]
        assert isinstance(text, str)
        u = j["usage"]
        assert 0 <= u["completion_tokens"] <= body["max_tokens"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        return
    frames = [f for f in raw.decode().split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert all(c["object"] == ("chat.completion.chunk" if chat else "text_completion") for c in chunks)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert reasons[-1] in ("stop", "length") and all(r is None for r in reasons[:-1])


@needs_model
def test_200_requests_16_clients(make_server):
    s = make_server("--slots", 8, "--n-ctx", 256, "-t", 2, "--max-queue", 16)
    errors = []
    next_i = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= N_REQUESTS:
                return
            path, body = body_for(i)
            try:
                status, raw = s.request("POST", path, body)
                check(path, body, status, raw)
            except Exception as e:  # noqa: BLE001 — collected and reported below
                errors.append((i, repr(e)))

    ts = [threading.Thread(target=client) for _ in range(N_CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    assert not errors, errors[:5]
    m = s.metrics()
    assert m["minfer_requests_total"] == N_REQUESTS
    assert m["minfer_requests_completed_total"] == N_REQUESTS
    assert m["minfer_requests_running"] == 0 and m["minfer_queue_depth"] == 0
    assert m["minfer_requests_queue_full_total"] == 0
    assert s.healthy()
    # A clean exit: under the asan-ubsan preset a leak or a sanitizer finding makes the
    # exit status non-zero and prints a report.
    s.terminate()
    assert s.proc.wait(120) == 0, s.stderr()[-3000:]
    assert "Sanitizer" not in s.stderr()
