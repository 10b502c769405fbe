"""Stage 17 tests: replicas failing behind a router. Two `minfer serve` replicas behind
vllm-router (round_robin, health checked every second, out after one failure; the shared
start-up code of deploy/replicas.py, network namespaces when root). Bars:
- SIGKILL of a replica with streams in flight: each stream on it ends at the client
  (an error status or a stream closed without `[DONE]`) within CLIENT_BOUND_S, the streams
  on the other replica finish whole, and every later request through the router succeeds;
- SIGTERM (drain) of a replica with a stream in flight: the stream finishes with
  finish_reason "length", all its tokens and `[DONE]`; the replica exits; every later
  request succeeds.
Skipped without vllm-router (PyPI vllm-router; on PATH, MINFER_VLLM_ROUTER or
scripts/setup.sh's venv $MINFER_CACHE/routers)."""
import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import BIN, CACHE, MODEL

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))
from replicas import Deployment, Router, metric, netns_works  # noqa: E402

_VENV_ROUTER = CACHE / "routers" / "bin" / "vllm-router"
ROUTER = (os.environ.get("MINFER_VLLM_ROUTER") or shutil.which("vllm-router")
          or (str(_VENV_ROUTER) if _VENV_ROUTER.exists() else None))

pytestmark = [
    pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)"),
    pytest.mark.skipif(not ROUTER, reason="vllm-router not installed (pip install vllm-router; "
                                          "or set MINFER_VLLM_ROUTER)"),
]

CLIENT_BOUND_S = 30.0  # a stream cut by a dead replica must end at the client by then
HEALTH_INTERVAL_S = 1
LONG_TOKENS = 160  # long enough to be in flight when the signal lands (-t 1, 2 slots)


@pytest.fixture
def cluster():
    logdir = tempfile.mkdtemp(prefix="minfer-scale-failure-")
    dep = Deployment(BIN, str(MODEL), 2, logdir, netns_works(), tag="sf", net=215, threads=1,
                     slots=2, n_ctx=1024, kv_events=False)
    router = None
    try:
        router = Router([ROUTER, "--policy", "round_robin",
                         "--health-check-interval-secs", str(HEALTH_INTERVAL_S),
                         "--health-failure-threshold", "1", "--health-check-timeout-secs", "1",
                         "--worker-urls", *[r.url for r in dep.replicas]], logdir)
        yield dep, router
    finally:
        if router:
            router.close()
        dep.close()


def stream(url, max_tokens, timeout=CLIENT_BOUND_S):
    """One streaming completion; returns dict(status, done, finish, tokens, error)."""
    u = urllib.parse.urlparse(url)
    out = {"status": None, "done": False, "finish": None, "tokens": 0, "error": None}
    body = json.dumps({"model": MODEL.name, "prompt": "Tell me a long story about a river.",
                       "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        out["status"] = r.status
        if r.status != 200:
            r.read()
            return out
        while line := r.fp.readline():
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                out["done"] = True
                break
            ev = json.loads(data)
            if ev.get("usage"):
                out["tokens"] = ev["usage"]["completion_tokens"]
            for ch in ev.get("choices") or []:
                out["finish"] = ch.get("finish_reason") or out["finish"]
    except (OSError, ValueError, http.client.HTTPException) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def start_streams(url, n, max_tokens):
    results = [None] * n

    def go(k):
        results[k] = stream(url, max_tokens)

    threads = [threading.Thread(target=go, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    return threads, results


def running(replica):
    return int(metric(replica.url, "vllm:num_requests_running"))


def wait_running(replicas, want, timeout=30):
    """Waits until replica k runs want[k] requests (at least); returns the counts."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        counts = [running(r) for r in replicas]
        if all(c >= w for c, w in zip(counts, want)):
            return counts
        time.sleep(0.05)
    raise AssertionError(f"requests did not start: running {counts}, wanted {want}")


def later_requests_all_succeed(router, n=6):
    for k in range(n):
        res = stream(router.url, 4)
        assert res["status"] == 200 and res["done"] and res["finish"] == "length", (k, res)


def test_sigkill_ends_its_streams_within_bound_and_later_requests_all_succeed(cluster):
    dep, router = cluster
    victim, survivor = dep.replicas
    threads, results = start_streams(router.url, 4, LONG_TOKENS)
    counts = wait_running(dep.replicas, [1, 1])
    victim.proc.send_signal(signal.SIGKILL)
    t_kill = time.time()
    for t in threads:
        t.join(max(0.1, CLIENT_BOUND_S + 5 - (time.time() - t_kill)))
    assert not any(t.is_alive() for t in threads), f"a client hung past the bound: {results}"
    whole = [r for r in results
             if r["status"] == 200 and r["done"] and r["tokens"] == LONG_TOKENS]
    cut = [r for r in results if r not in whole]
    # The survivor's streams finish whole; the victim's (running when it died) end cut.
    assert len(cut) >= counts[0] >= 1, (counts, results)
    assert len(whole) >= 1, (counts, results)
    for r in cut:
        assert r["error"] or r["status"] != 200 or not r["done"], r
    time.sleep(HEALTH_INTERVAL_S * 3)  # the router's health check takes the victim out
    before = metric(survivor.url, "minfer_requests_total")
    later_requests_all_succeed(router)
    assert metric(survivor.url, "minfer_requests_total") - before == 6


def test_sigterm_drains_the_stream_in_flight_and_later_requests_all_succeed(cluster):
    dep, router = cluster
    threads, results = start_streams(router.url, 1, LONG_TOKENS)
    t0 = time.time()
    counts = [0, 0]
    while sum(counts) == 0 and time.time() - t0 < 30:  # which replica the router chose
        counts = [running(r) for r in dep.replicas]
        time.sleep(0.05)
    assert sum(counts) == 1, counts
    victim = dep.replicas[counts.index(1)]
    victim.proc.send_signal(signal.SIGTERM)
    threads[0].join(CLIENT_BOUND_S + 5)
    assert not threads[0].is_alive(), "the drained stream hung"
    res = results[0]
    assert res["status"] == 200 and res["done"], res
    assert res["finish"] == "length" and res["tokens"] == LONG_TOKENS, res
    assert victim.proc.wait(30) == 0  # drained, then exited cleanly
    time.sleep(HEALTH_INTERVAL_S * 3)
    later_requests_all_succeed(router)
