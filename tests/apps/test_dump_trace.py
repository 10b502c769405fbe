"""`minfer MODEL PROMPT --dump-trace FILE.json` on SmolLM2: the file is Chrome trace-event
JSON (checked against a schema of the format with jsonschema) with one "X" span per
forward and, inside each, one span per executed op — exactly the compute ops of the
graph that forward ran (compared with --dump-graph-json of the same shapes), named by
the op; tracing does not change the generated text."""
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# Model runs are skipped under the sanitizers like the other CLI model tests (the ci pass
# runs them); the profile hook itself runs under ASan in tests/sched.
SANITIZED = os.environ.get("MINFER_SANITIZE", "0").upper() in ("1", "ON", "TRUE")
needs_model = pytest.mark.skipif(
    not MODEL.exists() or SANITIZED,
    reason=f"{MODEL} not present (scripts/setup.sh)" if not MODEL.exists() else
    "model runs are skipped under the sanitizers (the ci pass runs them)")

# The Trace Event Format (the subset minfer writes: complete "X" events and "M" metadata).
SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "ph", "pid", "tid"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "ph": {"enum": ["X", "M"]},
                    "cat": {"type": "string"},
                    "pid": {"type": "integer"},
                    "tid": {"type": "integer"},
                    "ts": {"type": "number", "minimum": 0},
                    "dur": {"type": "number", "minimum": 0},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}},
                     "then": {"required": ["ts", "dur", "cat", "args"]}},
                    {"if": {"properties": {"ph": {"const": "M"}}},
                     "then": {"properties": {"name": {"enum": ["process_name", "thread_name"]}},
                              "required": ["args"]}},
                ],
            },
        },
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
}
# Ops that do no work (aliases) are not spans; leaves are not ops.
NOT_RUN = {"input", "weight", "kv_region", "reshape", "view"}


def minfer(*args, timeout=300):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, timeout=timeout)
    assert r.returncode == 0, r.stderr.decode()
    return r


def graph_ops(path):
    g = json.loads(Path(path).read_text())
    return Counter(n["op"] for n in g["nodes"] if n["op"] not in NOT_RUN), g


@needs_model
def test_dump_trace_is_valid_trace_event_json_with_one_span_per_op_per_step(tmp_path):
    trace = tmp_path / "t.json"
    common = [MODEL, "--no-template", "-p", "The capital of France is", "-n", 6, "--ignore-eos",
              "--temp", 0, "-t", 2]
    plain = minfer(*common)
    traced = minfer(*common, "--dump-trace", trace)
    assert traced.stdout == plain.stdout  # timing the ops changes nothing they compute
    err = traced.stderr.decode()
    assert f"wrote trace (6 forwards," in err and str(trace) in err

    doc = json.loads(trace.read_text())
    jsonschema.validate(doc, SCHEMA)
    events = doc["traceEvents"]
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    ops = [e for e in events if e["ph"] == "X" and e["cat"] == "op"]
    # One prefill forward (the whole prompt), then one decode forward per further token.
    assert [s["name"] for s in steps] == ["prefill"] + ["decode"] * 5
    assert [s["args"]["step"] for s in steps] == list(range(6))
    assert f"op spans) to" in err and f"{len(ops)} op spans" in err

    # The graphs those forwards ran, from the same binary: the prompt's prefill graph and
    # the decode graph (a one-token prompt).
    prefill_ops, prefill_g = graph_ops(dump_graph(tmp_path, "The capital of France is", "pre.json"))
    decode_ops, decode_g = graph_ops(dump_graph(tmp_path, "Hi", "dec.json"))
    names = {n["id"]: n["name"] for n in decode_g["nodes"]}
    for s in steps:
        i = s["args"]["step"]
        mine = [o for o in ops if o["args"]["step"] == i]
        assert len(mine) == s["args"]["n_ops"]
        # Inside their step, in order, not overlapping (the CPU runs one op at a time).
        t = s["ts"]
        for o in mine:
            assert o["ts"] >= t - 1e-3 and o["dur"] >= 0
            t = o["ts"] + o["dur"]
        assert t <= s["ts"] + s["dur"] + 1e-3
        # Exactly the ops of the graph it ran: one span per executed node.
        assert len({o["args"]["node"] for o in mine}) == len(mine)
        want = prefill_ops if s["name"] == "prefill" else decode_ops
        assert Counter(o["name"] for o in mine) == want, s
        if s["name"] == "decode":
            for o in mine:
                assert o["args"]["tensor"] == names[o["args"]["node"]]
    assert {"mul_mat", "attention", "rope", "rms_norm_mul", "swiglu", "kv_store"} <= set(decode_ops)
    # Decode steps reuse one graph; the first forward planned its graph.
    assert len({s["args"]["graph_uid"] for s in steps[1:]}) == 1
    assert steps[0]["args"]["planned_now"] is True
    assert sum(prefill_ops.values()) == steps[0]["args"]["n_ops"] > 400


def dump_graph(tmp_path, prompt, name):
    out = tmp_path / name
    minfer(MODEL, "--no-template", "-p", prompt, "--dump-graph-json", out, "-t", 2)
    return out


@needs_model
def test_dump_trace_usage_errors(tmp_path):
    r = subprocess.run([BIN, str(MODEL), "-cnv", "--dump-trace", str(tmp_path / "t.json")],
                       capture_output=True, timeout=60, input=b"")
    assert r.returncode == 1 and b"--dump-trace traces single-shot runs" in r.stderr
    r = subprocess.run([BIN, str(MODEL), "hi", "--dump-trace", str(tmp_path / "no" / "dir" / "t.json")],
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and b"--dump-trace" in r.stderr


@needs_model
def test_op_timing_table_counts_the_decode_graphs_ops(tmp_path):
    """MINFER_OP_TIMING=1: a per-op table of the decode steps on stderr, node counts per
    step equal to the decode graph's compute ops, shares summing to 100 %."""
    env = dict(os.environ, MINFER_OP_TIMING="1")
    args = [BIN, str(MODEL), "--no-template", "-p", "Hi", "-n", "5", "--ignore-eos", "--temp", "0", "-t", "2"]
    r = subprocess.run(args, capture_output=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr.decode()
    plain = subprocess.run(args, capture_output=True, timeout=300)
    assert r.stdout == plain.stdout and b"MINFER_OP_TIMING" not in plain.stderr
    lines = [l for l in r.stderr.decode().splitlines() if l.startswith("[MINFER_OP_TIMING]")]
    assert "over 4 decode steps:" in lines[0]
    rows = {}
    for l in lines[1:]:
        op, n, _, ms, _, pct = l.split()[1:7]
        rows[op] = (int(n), float(ms), float(pct.rstrip("%")))
    decode_ops, _ = graph_ops(dump_graph(tmp_path, "Hi", "dec.json"))
    assert {op: n for op, (n, _, _) in rows.items()} == dict(decode_ops)
    assert abs(sum(p for _, _, p in rows.values()) - 100.0) < 1.0
    assert max(rows, key=lambda op: rows[op][1]) == "mul_mat"
