"""The engine view at GET /viz against a real `minfer serve` with SmolLM2: the runtime
graph drawn by Graphviz (the SVG has the model's nodes), the live panel's counters
advance while a request runs (headless Debian chromium via Selenium), per-op timing
runs only while a view is connected, and the view's data routes need the API key
(EventSource gets it as ?api_key=). Screenshot: <build>/artifacts/web/viz.png."""
import json
import time
import urllib.request

import pytest
from browser import make_driver, missing_reason, screenshot, wait_until
from conftest import MODEL, Server

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")
needs_browser = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


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
    again = events(server.url + "/viz/events", 1)[0]
    assert again["graph"]["steps"] > first["graph"]["steps"]
    assert again["ops"]["profiled_steps"] == before, "steps were timed with no view connected"


@needs_browser
def test_view_draws_the_graph_and_the_panel_follows_a_request(server):
    from selenium.webdriver.common.by import By

    d = make_driver(1400, 900)
    try:
        d.get(server.url + "/viz")
        n_nodes = wait_until(d, "window.minferViz.nodes.size", 30, what="the graph SVG")
        assert n_nodes > 400
        assert len(d.find_elements(By.CSS_SELECTOR, "#graph svg g.node")) == n_nodes
        wait_until(d, "window.minferViz.events > 0", 10, what="the first event")
        steps0 = d.execute_script("return window.minferViz.last.graph.steps")
        decode0 = d.execute_script("return window.minferViz.last.tokens.decode")
        # Watch every event the page gets while a request runs from the page's run box.
        d.execute_script("""
          window.__seen = [];
          const orig = window.minferViz;
          setInterval(() => { if (orig.last) window.__seen.push(JSON.parse(JSON.stringify(orig.last))); }, 50);""")
        d.find_element(By.ID, "max-tokens").clear()
        d.find_element(By.ID, "max-tokens").send_keys("40")
        d.find_element(By.ID, "run").click()
        wait_until(d, "window.__seen.some((e) => e.requests.running >= 1)", 20, what="a running request")
        wait_until(d, f"window.minferViz.last.graph.steps >= {steps0} + 10", 30, what="ten steps")
        wait_until(d, "!document.getElementById('run').disabled", 60, what="the run to finish")
        wait_until(d, f"window.minferViz.last.requests.running === 0 && window.minferViz.last.tokens.decode > {decode0}", 10)
        seen = d.execute_script("return window.__seen")
        running = [e for e in seen if e["requests"]["running"] >= 1]
        assert running, "no event saw the request running"
        assert any(s["cells"] > 0 and s["state"] in ("prefill", "decode") for e in running for s in e["kv"]["seqs"])
        last = d.execute_script("return window.minferViz.last")
        assert last["graph"]["reuses"] > 0 and last["graph"]["uid"] > 0
        ops = last["ops"]
        assert ops["profiled_steps"] >= 10
        assert {"mul_mat", "attention"} <= {o["op"] for o in ops["by_op"]}
        assert all(o["us"] >= 0 and o["n"] > 0 for o in ops["by_op"])
        assert len(ops["slowest"]) > 0
        # The panel shows those numbers, and the slowest nodes are outlined in the graph.
        assert d.find_element(By.ID, "steps").text == str(last["graph"]["steps"])
        assert len(d.find_elements(By.CSS_SELECTOR, "#ops-table tbody tr")) == len(ops["by_op"])
        assert len(d.find_elements(By.CSS_SELECTOR, "#graph g.node.hot")) > 0
        assert d.find_element(By.ID, "out").text.strip()
        # The counters agree with /metrics.
        m = server.metrics()
        assert m["minfer_decode_tokens_total"] >= last["tokens"]["decode"] > decode0
        screenshot(d, "viz.png")
    finally:
        d.quit()


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


@needs_browser
def test_minfer_viz_serves_the_view_and_runs_its_prompt():
    """`minfer viz MODEL -p TEXT`: one slot, the view at /, the prompt run once on opening."""
    from pathlib import Path

    from selenium.webdriver.common.by import By

    s = Server("-t", 2, "-c", 512, "-p", "Name three colours.", command="viz")
    d = make_driver(1280, 900)
    try:
        page = (Path(__file__).resolve().parents[2] / "src" / "server" / "web" / "viz.html").read_bytes()
        assert s.request("GET", "/")[1] == page
        cfg = json.loads(s.request("GET", "/viz/config")[1])
        assert cfg == {"mode": "viz", "model": MODEL.name, "prompt": "Name three colours.", "autorun": True}
        d.get(s.url + "/")
        assert wait_until(d, "window.minferViz.nodes.size", 30, what="the graph") > 400
        assert d.find_element(By.ID, "prompt").get_attribute("value") == "Name three colours."
        wait_until(d, "window.minferViz.last && window.minferViz.last.requests.completed >= 1", 60,
                   what="the prompt's run to complete")
        wait_until(d, "document.getElementById('out').textContent.trim().length > 0", 10)
        last = d.execute_script("return window.minferViz.last")
        assert last["requests"]["slots"] == 1 and last["graph"]["steps"] > 1
        assert last["ops"]["profiled_steps"] > 0
        screenshot(d, "minfer-viz.png")
    finally:
        d.quit()
        s.kill()
