"""The engine view in a real browser (headless Debian chromium via Selenium) against a
real `minfer serve` / `minfer viz` with SmolLM2: the page draws the graph SVG (the
model's nodes) and its live panel's counters advance while a request runs; `minfer viz
-p` runs its prompt in the view. The data routes alone: test_viz_routes.py.
Screenshots: <build>/artifacts/web/viz.png, minfer-viz.png."""
import json

import pytest
from browser import make_driver, missing_reason, screenshot, wait_until
from conftest import MODEL, Server

pytestmark = [
    pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)"),
    pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason())),
]
needs_browser = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", 2, "--n-ctx", 1024, "-t", 2)
    yield s
    s.kill()


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
