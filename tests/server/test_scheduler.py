"""Stage 17 tests of the request scheduler on a real server: batch invariance (a seeded
request's bytes alone = beside 7 other requests, with 1 and 2 threads), prefix reuse
(only the delta is prefilled, counted in /metrics; a running sequence's prefix is shared
copy-on-write), cancellation on disconnect (the slot and its cells are freed), and the
SIGTERM drain (in-flight requests finish, exit code 0)."""
import http.client
import json
import socket
import threading
import time
import urllib.parse

import pytest

from conftest import needs_model

COMP = "/v1/completions"
CHAT = "/v1/chat/completions"

TARGET = {"messages": [{"role": "user", "content": "Write a short poem about the sea."}],
          "max_tokens": 40, "temperature": 0.9, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
          "seed": 1234}
OTHERS = [
    {"prompt": "Once upon a time", "max_tokens": 60, "seed": 1, "temperature": 1.0},
    {"prompt": "The history of Rome " * 20, "max_tokens": 30, "seed": 2},
    {"prompt": "def fib(n):", "max_tokens": 50, "seed": 3, "temperature": 0.5},
    {"prompt": "List of fruits: apple,", "max_tokens": 45, "seed": 4, "stream": True},
    {"prompt": "Q: What is 2+2?\nA:", "max_tokens": 20, "seed": 5, "temperature": 0},
    {"prompt": "Paris is", "max_tokens": 55, "seed": 6, "stream": True},
    {"prompt": "Dear diary, today " * 8, "max_tokens": 35, "seed": 7, "temperature": 1.2},
]


def run_all(server, jobs):
    """Runs (path, body) jobs concurrently; returns their (status, raw bytes) in order."""
    out = [None] * len(jobs)

    def one(i, path, body, delay):
        time.sleep(delay)
        out[i] = server.request("POST", path, body)

    ts = [threading.Thread(target=one, args=(i, *j)) for i, j in enumerate(jobs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    return out


@needs_model
def test_batch_invariance_alone_vs_with_seven_others(make_server):
    texts = []
    for threads in (1, 2):
        s = make_server("--slots", 8, "--n-ctx", 512, "-t", threads)
        st, alone = s.post(CHAT, TARGET)
        assert st == 200
        text = alone["choices"][0]["message"]["content"]
        assert alone["usage"]["completion_tokens"] > 5
        texts.append(text)
        # The same request joins a running batch of 7 different requests (some
        # prefilling, some decoding), twice: as the last arrival and among the first.
        for target_delay, other_delay in ((0.3, 0.0), (0.0, 0.05)):
            jobs = [(COMP, o, other_delay) for o in OTHERS] + [(CHAT, TARGET, target_delay)]
            res = run_all(s, jobs)
            assert all(r[0] == 200 for r in res), [r[0] for r in res]
            got = json.loads(res[-1][1])
            assert got["choices"][0]["message"]["content"] == text
            assert got["usage"]["completion_tokens"] == alone["usage"]["completion_tokens"]
        assert s.metrics()["minfer_steps_total"] > 0
        s.kill()
    assert texts[0] == texts[1]  # 1 and 2 threads give the same bytes


@needs_model
def test_full_queue_is_429_and_queued_requests_are_served(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 2, "--max-queue", 2)
    long = {"prompt": "Count:", "max_tokens": 60, "seed": 1, "logit_bias": {"2": -100, "0": -100}}
    res = [None] * 3

    def one(i):
        res[i] = s.request("POST", COMP, long)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    ts[0].start()
    s.wait_metric("minfer_requests_running", lambda v: v == 1)
    for t in ts[1:]:
        t.start()
    s.wait_metric("minfer_queue_depth", lambda v: v == 2)
    st, body = s.post(COMP, long)  # one running, two queued: no room
    assert st == 429 and body["error"]["type"] == "rate_limit_error"
    for t in ts:
        t.join(120)
    assert [r[0] for r in res] == [200, 200, 200]
    texts = {json.loads(r[1])["choices"][0]["text"] for r in res}
    assert len(texts) == 1  # same seeded request: same bytes, whichever waited
    m = s.metrics()
    assert m["minfer_requests_queue_full_total"] == 1 and m["minfer_queue_depth"] == 0


def long_prefix():
    # ~500 tokens of varied text shared by both requests.
    words = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
             "omicron pi rho sigma tau upsilon phi chi psi omega").split()
    return " ".join(f"{w}{i % 7}" for i, w in enumerate(words * 11))


@needs_model
def test_prefix_reuse_prefills_only_the_delta(make_server):
    s = make_server("--slots", 2, "--n-ctx", 2048, "-t", 2)
    prefix = long_prefix()
    m0 = s.metrics()
    st, r1 = s.post(COMP, {"prompt": prefix + " First question: why?", "max_tokens": 4,
                           "temperature": 0})
    assert st == 200
    n1 = r1["usage"]["prompt_tokens"]
    assert n1 >= 500, n1
    m1 = s.metrics()
    assert m1["minfer_prefill_tokens_total"] - m0["minfer_prefill_tokens_total"] == n1
    st, r2 = s.post(COMP, {"prompt": prefix + " Second question: how?", "max_tokens": 4,
                           "temperature": 0})
    assert st == 200
    n2 = r2["usage"]["prompt_tokens"]
    m2 = s.metrics()
    reused = m2["minfer_prefix_reused_tokens_total"] - m1["minfer_prefix_reused_tokens_total"]
    prefilled = m2["minfer_prefill_tokens_total"] - m1["minfer_prefill_tokens_total"]
    assert reused >= 495, reused
    assert prefilled == n2 - reused
    assert prefilled < 20
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == reused
    # The log line is written once the response is out: give it a moment.
    t0 = time.time()
    while f"reused={int(reused)}" not in s.stderr() and time.time() - t0 < 10:
        time.sleep(0.05)
    assert f"reused={int(reused)}" in s.stderr()


@needs_model
def test_prefix_of_a_running_request_is_shared_and_output_unchanged(make_server):
    s = make_server("--slots", 2, "--n-ctx", 2048, "-t", 2)
    prefix = long_prefix()
    second = {"prompt": prefix + " Second question: how?", "max_tokens": 12, "seed": 9}
    # Reference: the second request on a server that has seen nothing else.
    st, ref = s.post(COMP, second)
    assert st == 200
    s.kill()
    s2 = make_server("--slots", 2, "--n-ctx", 2048, "-t", 2)
    first = {"prompt": prefix + " First question: why?", "max_tokens": 400, "seed": 1,
             "stream": True}
    t = threading.Thread(target=s2.request, args=("POST", COMP, first))
    t.start()
    s2.wait_metric("minfer_decode_tokens_total", lambda v: v >= 2)
    st, got = s2.post(COMP, second)
    m = s2.metrics()
    t.join(300)
    assert st == 200
    assert got["choices"][0]["text"] == ref["choices"][0]["text"]
    assert got["usage"]["prompt_tokens_details"]["cached_tokens"] >= 495
    assert m["minfer_kv_cells_shared"] >= 495 or m["minfer_requests_running"] == 0


def open_stream(server, body):
    u = urllib.parse.urlparse(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", CHAT, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, resp


@needs_model
def test_disconnect_mid_stream_frees_the_slot(make_server):
    s = make_server("--slots", 2, "--n-ctx", 1024, "-t", 2)
    conn, resp = open_stream(s, {"messages": [{"role": "user", "content": "Tell me a long story."}],
                                 "max_tokens": 900, "stream": True, "seed": 1,
                                 "logit_bias": {"2": -100, "0": -100}})
    n = 0
    while n < 5:
        line = resp.fp.readline()
        if line.startswith(b"data: "):
            n += 1
    m = s.metrics()
    assert m["minfer_requests_running"] == 1 and m["minfer_kv_cells_used"] > 0
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    t0 = time.time()
    m = s.wait_metric("minfer_requests_running", lambda v: v == 0, timeout_s=20)
    assert time.time() - t0 < 20
    assert m["minfer_requests_cancelled_total"] == 1
    assert m["minfer_kv_cells_used"] == 0  # a cancelled sequence keeps no cells
    assert m["minfer_completion_tokens_total"] < 900
    assert s.healthy()


@needs_model
def test_sigterm_finishes_in_flight_requests_and_exits_0(make_server):
    s = make_server("--slots", 2, "--n-ctx", 512, "-t", 2)
    bodies = [{"prompt": f"Story number {i}:", "max_tokens": 40, "seed": i,
               "logit_bias": {"2": -100, "0": -100}} for i in range(3)]
    res = [None] * 3

    def one(i):
        res[i] = s.request("POST", COMP, bodies[i])

    ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    s.wait_metric("minfer_requests_running", lambda v: v >= 2)
    # The third queued too (on a loaded machine its HTTP thread may still be reading it;
    # a request that reaches the scheduler after the signal is refused, by design).
    s.wait_metric("minfer_queue_depth", lambda v: v >= 1)
    s.terminate()
    # While it drains, /health answers 503 (a router or readiness probe stops sending it
    # requests it would refuse); the signal is handled asynchronously, so poll a little.
    health, deadline = None, time.time() + 10
    while time.time() < deadline:
        try:
            health = s.request("GET", "/health", timeout=10)
        except OSError:
            break
        if health[0] == 503:
            break
        time.sleep(0.02)
    assert health is not None and health[0] == 503, health
    assert json.loads(health[1])["error"]["message"] == "the server is shutting down"
    for t in ts:
        t.join(120)
    assert s.proc.wait(60) == 0
    for st, raw in res:
        assert st == 200, raw
        body = json.loads(raw)
        assert body["usage"]["completion_tokens"] == 40
        assert body["choices"][0]["finish_reason"] == "length"
    assert "draining" in s.stderr()


@needs_model
def test_second_signal_ends_the_drain_now(make_server):
    s = make_server("--slots", 1, "--n-ctx", 1024, "-t", 2)
    body = {"prompt": "Count:", "max_tokens": 900, "logit_bias": {"2": -100, "0": -100}}
    res = []
    t = threading.Thread(target=lambda: res.append(s.request("POST", COMP, body)))
    t.start()
    s.wait_metric("minfer_decode_tokens_total", lambda v: v >= 2)
    s.terminate()
    time.sleep(0.3)
    s.terminate()
    assert s.proc.wait(60) == 0
    t.join(60)
    st, raw = res[0]
    assert st == 503 and json.loads(raw)["error"]["message"] == "the server is shutting down"
    assert "stopping now" in s.stderr()


@needs_model
def test_sigterm_lets_running_streams_end_with_finish_reason_and_done(make_server):
    # The drain must not cut a stream: its last chunks (finish_reason, then
    # "data: [DONE]") are written before the HTTP server stops, and the chunked body
    # ends properly (an unterminated one is http.client's IncompleteRead).
    s = make_server("--slots", 2, "--n-ctx", 512, "-t", 2)
    host, port = urllib.parse.urlsplit(s.url).netloc.split(":")
    body = {"prompt": "Story:", "max_tokens": 60, "stream": True, "seed": 3,
            "logit_bias": {"2": -100, "0": -100}}
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", COMP, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    first = r.readline()  # a token arrived: the request runs
    assert first.startswith(b"data: ")
    s.terminate()
    rest = r.read().decode()
    conn.close()
    events = [ln[len("data: "):] for ln in (first.decode() + rest).splitlines()
              if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    finals = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]]
    assert finals[-1] == "length" and all(f is None for f in finals[:-1])
    assert s.proc.wait(60) == 0
    assert "draining" in s.stderr()


@needs_model
def test_prompt_tokens_total_counts_every_admitted_prompt(make_server):
    s = make_server("--slots", 1, "--n-ctx", 512, "-t", 2)
    n = 0
    for prompt in ["One two three", "The quick brown fox jumps"]:
        st, body = s.post(COMP, {"prompt": prompt, "max_tokens": 2})
        assert st == 200, body
        n += body["usage"]["prompt_tokens"]
    assert n > 0
    assert s.metrics()["minfer_prompt_tokens_total"] == n


@needs_model
def test_a_second_server_on_a_busy_port_is_an_error(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1)
    port = urllib.parse.urlsplit(s.url).port
    from conftest import BIN, MODEL
    import subprocess
    r = subprocess.run([BIN, "serve", str(MODEL), "--port", str(port), "-t", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert f"minfer: error: 127.0.0.1:{port} is in use" in r.stderr
    assert s.healthy()
