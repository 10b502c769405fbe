"""Stage 18 tests (CLI generation path): `minfer MODEL [PROMPT] [flags]` on the real
SmolLM2 model (skipped when the model cache lacks it). Bars: stdout carries only the
generated text; the stderr run header and counters; thread-count determinism of the
bytes; stop strings; graph dumps; traces; errors."""
import json
import os
import subprocess
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")


def minfer(*args, env=None, stdin=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([BIN, *map(str, args)], capture_output=True, env=e, input=stdin, timeout=300)


@needs_model
def test_stdout_is_only_generated_text_and_stderr_has_the_run_header():
    r = minfer(MODEL, PROMPT, "--no-template", "--greedy", "-n", 8, "-t", 2)
    assert r.returncode == 0, r.stderr.decode()
    err = r.stderr.decode()
    out = r.stdout.decode()
    assert "Paris" in out
    for word in ("Loading model", "Prefill:", "Generated:", "rebuilds:"):
        assert word not in out
    assert "Prompt: 5 tokens" in err
    assert "Prefill: 5 tokens in" in err and "tok/s" in err
    assert "Generated: 8 tokens in" in err
    assert "rebuilds: 1, reuses: 6" in err  # 7 forwards: the 8th token needs none
    assert "chat templates" not in err  # --no-template silences the note


@needs_model
def test_output_bytes_do_not_depend_on_the_thread_count():
    outs = []
    for t in (1, 2):
        r = minfer(MODEL, PROMPT, "-n", 12, "-t", t, "--seed", 7, "--no-template")
        assert r.returncode == 0, r.stderr.decode()
        outs.append(r.stdout)
    assert outs[0] == outs[1]


@needs_model
def test_prompt_from_stdin_and_flags_form():
    a = minfer(MODEL, PROMPT, "--greedy", "-n", 6, "--no-template")
    b = minfer("-m", MODEL, "--greedy", "-n", 6, "--no-template", stdin=PROMPT.encode())
    c = minfer("-m", MODEL, "-p", PROMPT, "--greedy", "-n", 6, "--no-template")
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout == c.stdout
    assert "Notice" not in c.stderr.decode()  # SmolLM2 has a template: no fallback notice


@needs_model
def test_stop_string_cuts_the_text(tmp_path):
    full = minfer(MODEL, PROMPT, "--greedy", "-n", 8, "--no-template").stdout
    assert b"Paris" in full
    r = minfer(MODEL, PROMPT, "--greedy", "-n", 8, "--no-template", "--stop", "Paris",
               "--dump-json", tmp_path / "o.json", "--dump-logits", tmp_path / "o.f32")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == full[: full.index(b"Paris")]
    assert "stop: stop string" in r.stderr.decode()
    j = json.loads((tmp_path / "o.json").read_text())
    assert j["stopped_at_eog"] is False and j["stop"] == "stop string"
    assert len(j["prompt_ids"]) == 5
    assert (tmp_path / "o.f32").stat().st_size == 4 * 49152 * len(j["generated_ids"])


@needs_model
def test_dump_graph_writes_and_exits(tmp_path):
    r = minfer(MODEL, PROMPT, "--dump-graph", tmp_path / "g.dot", "--dump-graph-json", tmp_path / "g.json",
               "--no-template")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b""
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    g = json.loads((tmp_path / "g.json").read_text())
    names = {n["name"] for n in g["nodes"]}
    assert {"attn_norm-0", "l_out-29", "result_output", "tail_ids"} <= names


@needs_model
def test_rebuild_trace_prints_one_line_per_rebuild_and_timing_line():
    r = minfer(MODEL, PROMPT, "--greedy", "-n", 4, "--no-template",
               env={"MINFER_REBUILD_TRACE": "1", "MINFER_TIMING": "1", "MINFER_GRAPH_TRACE": "1"})
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stderr.decode().splitlines()
    rebuilds = [l for l in lines if l.startswith("rebuild ")]
    assert len(rebuilds) == 2  # the prefill graph, then the decode graph
    assert "gtype=prefill" in rebuilds[0] and "gtype=decode" in rebuilds[1]
    assert all(" ms" in l for l in rebuilds)
    # prefill + 3 decode forwards: the 4th token ends the run at -n without a forward
    assert sum(l.startswith("[graph] execute") for l in lines) == 4
    assert any(l.startswith("[MINFER_TIMING] over ") for l in lines)


def test_missing_model_is_an_error():
    r = minfer("/nonexistent/model.gguf", "hi")
    assert r.returncode == 1
    assert r.stderr.decode().startswith("minfer: error:") or "minfer: error:" in r.stderr.decode()
    assert r.stdout == b""


def _cpu_has_avx512_vnni():
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni"))


@pytest.mark.skipif(not _cpu_has_avx512_vnni(), reason="CPU lacks AVX-512 VNNI")
@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct.Q4_1.gguf",
                                  "minfer-fixture-qwen2.5-0.5b-q4_0.gguf",
                                  "minfer-fixture-qwen2.5-0.5b-q8_0.gguf",
                                  "minfer-fixture-qwen2.5-0.5b-q4_k_m.gguf",
                                  "minfer-fixture-qwen2.5-0.5b-f16.gguf"])
def test_avx512_forward_equals_scalar_reference_bitwise(tmp_path, name):
    """Q4_0 / Q4_1 / Q5_0 / Q8_0 matmuls on AVX-512 keep one f32 lane per weight row with
    the scalar kernel's expression, Q4_K / Q6_K keep one lane order on every ISA, and every
    other op's SIMD form equals its scalar twin: a whole greedy run (prefill and 8 decode
    steps) gives the same logits bit for bit."""
    model = CACHE / "models" / name
    if not model.exists():
        pytest.skip(f"{model} not present (scripts/setup.sh, tools/make_test_models.sh)")
    dumps = []
    for isa in ("scalar", "avx512"):
        out = tmp_path / f"{isa}.f32"
        r = minfer(model, "The quick brown fox", "--no-template", "--greedy", "-n", 8, "-t", 2,
                   "--dump-logits", out, env={"MINFER_CPU_ISA": isa})
        assert r.returncode == 0, r.stderr.decode()
        dumps.append(out.read_bytes())
    assert len(dumps[0]) > 0 and dumps[0] == dumps[1]
