"""Stage 18 tests (the command line): llama.cpp's --log-disable on the real binary and
SmolLM2 (skipped when the model cache lacks it). Bars: a successful generation and a
one-turn conversation under a pipe leave stderr empty — notices, load lines, turn
reports and timings included — with stdout byte for byte the run without the flag;
errors still print."""
import os
import subprocess
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")


def minfer(*args, stdin=b"", env=None):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, input=stdin, timeout=300,
                          env=env)


@needs_model
def test_generation_prints_nothing_on_stderr_and_the_same_stdout():
    # Flags that print a notice, a capped value and the verbose lines, the timing knobs,
    # and a context shift's report: all of them informational.
    args = [MODEL, "The capital of France is", "--greedy", "-n", 60, "-c", 48, "-t", 99,
            "-ngl", 99, "--no-mmap", "-v", "--context-shift", "--ignore-eos"]
    env = dict(os.environ, MINFER_TIMING="1", MINFER_OP_TIMING="1", MINFER_REBUILD_TRACE="1")
    loud = minfer(*args, env=env)
    assert loud.returncode == 0, loud.stderr.decode()
    err = loud.stderr.decode()
    for line in ("notice: -ngl 99", "notice: -t 99 capped", "Loading model:", "[verbose] sampler",
                 "Generated: 60 tokens", "context shifts:", "[MINFER_TIMING]", "rebuild uid"):
        assert line in err, (line, err)
    quiet = minfer(*args, "--log-disable", env=env)
    assert quiet.returncode == 0
    assert quiet.stderr == b""
    assert quiet.stdout == loud.stdout and quiet.stdout


@needs_model
def test_a_piped_conversation_turn_prints_nothing_on_stderr_and_the_same_replies(tmp_path):
    args = [MODEL, "-cnv", "--greedy", "-n", 12, "-t", 2, "--session", tmp_path / "s.bin"]
    loud = minfer(*args, stdin=b"Hi\n/clear\n")
    assert loud.returncode == 0, loud.stderr.decode()
    for line in ("[turn 1]", "[history cleared]", "[session] saved", "conversation ended"):
        assert line in loud.stderr.decode()
    (tmp_path / "s.bin").unlink()
    quiet = minfer(*args, "--log-disable", stdin=b"Hi\n/clear\n")
    assert quiet.returncode == 0
    assert quiet.stderr == b""
    assert quiet.stdout == loud.stdout and quiet.stdout


def test_usage_errors_still_print():
    r = minfer("no-such-model.gguf", "hi", "--log-disable", "--temp", "warm")
    assert r.returncode == 1
    assert r.stderr.decode().startswith("minfer: error: --temp: 'warm' is not a number")
    r = minfer("no-such-model.gguf", "hi", "--log-disable")
    assert r.returncode == 1
    assert r.stderr.decode().startswith("minfer: error: ")
    assert "Loading model" not in r.stderr.decode()


@needs_model
def test_errors_inside_a_conversation_still_print():
    r = minfer(MODEL, "-cnv", "--greedy", "-n", 4, "-t", 2, "--log-disable", stdin=b"/bogus\n")
    assert r.returncode == 1
    assert r.stderr.decode() == "error: unknown command '/bogus' — try /help\n"
