"""The engine view's data routes against a real `minfer serve` with SmolLM2 (HTTP only,
so they also run under the sanitizers): the runtime graph laid out by Graphviz (the SVG
has every compute node of the model, one cluster per layer), the graph JSON, the SSE
live panel, per-op timing only while a view is connected, and the API key rules (the
EventSource form ?api_key= for /viz/* only)."""
import json
import threading
import time
import urllib.request

import pytest
from conftest import MODEL, Server

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", 2, "--n-ctx", 1024, "-t", 2)
    yield s
    s.kill()


def events(url, n, timeout=20):
    """The first n SSE events of GET /viz/events, parsed."""
    out = []
    with urllib.request.urlopen(url, timeout=timeout) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        for line in r:
            if line.startswith(b"data: "):
                out.append(json.loads(line[6:]))
                if len(out) == n:
                    return out
    return out


def test_graph_svg_and_json_describe_the_model(server):
    status, body = server.request("GET", "/viz/graph.svg")
    assert status == 200, body[:200]
    svg = body.decode()
    assert svg.lstrip().startswith("<?xml") or "<svg" in svg[:400]
    # Every compute node of the decode graph is a box titled n<id>; layers are clusters.
    g = json.loads(server.request("GET", "/viz/graph.json")[1])
    compute = [n for n in g["nodes"] if n["op"] not in ("weight", "kv_region", "input")]
    for n in compute:
        assert f"<title>n{n['id']}</title>" in svg, n
    assert svg.count('class="node"') >= len(compute) > 400
    assert svg.count('class="cluster"') == 30  # SmolLM2-135M has 30 blocks
    assert "fused: rms_norm · mul" in svg and "w: blk.0.attn_q.weight" in svg
    assert {"mul_mat", "attention", "rope", "kv_store", "rms_norm_mul", "swiglu"} <= {n["op"] for n in compute}
    assert "<script" not in svg


def test_per_op_timing_only_while_a_view_watches(server):
    first = events(server.url + "/viz/events", 1)[0]
    before = first["ops"]["profiled_steps"]
    time.sleep(1.0)  # the server notices the closed stream at its next event (<= 350 ms)
    status, r = server.post("/v1/completions", {"prompt": "One two three", "max_tokens": 8, "temperature": 0})
    assert status == 200
    # The response can arrive before the step's KV numbers are published: take the first
    # event in which no sequence is busy any more.
    again = next(e for e in events(server.url + "/viz/events", 10)
                 if all(q["state"] not in ("prefill", "decode") for q in e["kv"]["seqs"]))
    assert again["graph"]["steps"] > first["graph"]["steps"]
    assert again["ops"]["profiled_steps"] == before, "steps were timed with no view connected"
    # KV per sequence: the finished request's cells stay as an idle cache (its positions).
    kv = again["kv"]
    idle = [q for q in kv["seqs"] if q["state"] == "idle"]
    assert idle and all(q["cells"] == q["n_past"] > 0 for q in idle), kv
    assert kv["used"] == server.metrics()["minfer_kv_cells_used"] <= sum(q["cells"] for q in kv["seqs"])
    assert kv["free"] == kv["total"] - kv["used"] and kv["total"] == 2 * 1024


def test_view_data_needs_the_api_key():
    s = Server("--slots", 1, "--n-ctx", 256, "-t", 2, "--api-key", "k3y")
    try:
        assert s.request("GET", "/viz")[0] == 200  # the page itself is public
        assert s.request("GET", "/viz/graph.svg")[0] == 401
        assert s.request("GET", "/viz/events")[0] == 401
        assert s.request("GET", "/viz/graph.json", headers={"Authorization": "Bearer k3y"})[0] == 200
        assert s.request("GET", "/viz/graph.json?api_key=nope")[0] == 401
        ev = events(s.url + "/viz/events?api_key=k3y", 2)
        assert len(ev) == 2 and ev[0]["requests"]["slots"] == 1
        assert s.request("GET", "/metrics?api_key=k3y")[0] == 401  # the query key is for /viz/* only
    finally:
        s.kill()


def test_server_with_a_view_stops_cleanly():
    """SIGTERM while a view is connected, after the graph was laid out: the event stream
    ends and the server exits 0 (under ASan: no leak reported)."""
    s = Server("--slots", 1, "--n-ctx", 256, "-t", 2)
    try:
        assert s.request("GET", "/viz/graph.svg")[0] == 200
        got = []
        t = threading.Thread(target=lambda: got.extend(events(s.url + "/viz/events", 1000, 60)))
        t.start()
        time.sleep(0.5)
        s.terminate()
        assert s.proc.wait(60) == 0, s.stderr()[-3000:]
        t.join(10)
        assert not t.is_alive() and len(got) >= 1
    finally:
        s.kill()
