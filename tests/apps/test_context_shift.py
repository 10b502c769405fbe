"""Stage 18 tests (the command line): llama.cpp's --context-shift / --keep on the real
binary and SmolLM2 (Gemma 3 270M for a vocabulary that adds BOS); skipped when the model
cache lacks them. Bars: a run with a 64-token context goes past it with the flag and
stops at it without; the text before the first shift is the unshifted run's; --keep's
count (BOS, -1, past the prompt) as stderr reports it; bad values are usage errors
before the model loads; --keep alone is accepted with a notice; the conversation mode
shifts within a reply."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from gguf_header import GgufHeader

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
PROMPT = "The capital of France is"
RAW = ["--no-template", "--greedy", "-t", "2", "--ignore-eos"]

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")
needs_gemma = pytest.mark.skipif(not GEMMA.exists(), reason=f"{GEMMA} not present")


def minfer(*args, stdin=b""):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, input=stdin, timeout=300)


def run_json(tmp_path, *args, model=MODEL):
    out = tmp_path / "run.json"
    r = minfer(model, PROMPT, *RAW, "--dump-json", out, *args)
    assert r.returncode == 0, r.stderr.decode()
    return r, json.loads(out.read_text())


def shifts(r):
    """(shifts, discarded, kept) from `context shifts: K (D tokens discarded, the first N kept)`."""
    m = re.search(r"^context shifts: (\d+) \((\d+) tokens discarded, the first (\d+) kept\)$",
                  r.stderr.decode(), re.M)
    assert m, r.stderr.decode()
    return tuple(int(g) for g in m.groups())


def usage_error(r, needle):
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert err.startswith("minfer: error: ") and needle in err, err
    assert r.stdout == b""


@needs_model
def test_a_full_context_ends_the_run_without_the_flag_and_shifts_with_it(tmp_path):
    plain, pj = run_json(tmp_path, "-c", 64, "-n", 100)
    n_prompt = len(pj["prompt_ids"])
    # The token sampled for position 64 is printed, then the run ends.
    assert pj["stop"] == "context full"
    assert len(pj["generated_ids"]) == 64 - n_prompt + 1
    assert "context shifts" not in plain.stderr.decode()
    for off in ("--no-context-shift",):
        r, j = run_json(tmp_path, "-c", 64, "-n", 100, "--context-shift", off)
        assert j["stop"] == "context full" and r.stdout == plain.stdout

    r, j = run_json(tmp_path, "-c", 64, "-n", 100, "--context-shift")
    assert j["stop"] == "n_predict"
    assert len(j["generated_ids"]) == 100
    n, discarded, kept = shifts(r)
    # --keep 0 on a vocabulary without BOS: half of the 64 positions go at each shift.
    assert kept == 0 and discarded == n * 32
    # Positions after the prompt: 64 - n_prompt before the first shift, 32 after each.
    assert n == 1 + (100 - 1 - (64 - n_prompt)) // 32
    # Up to the first shift the run is the unshifted one, token for token and byte for byte.
    assert j["generated_ids"][:len(pj["generated_ids"])] == pj["generated_ids"]
    assert r.stdout.startswith(plain.stdout) and len(r.stdout) > len(plain.stdout)


@needs_model
def test_keep_counts_prompt_tokens_and_minus_one_or_too_many_is_the_whole_prompt(tmp_path):
    _, pj = run_json(tmp_path, "-n", 1)
    n_prompt = len(pj["prompt_ids"])
    for keep, want in ((3, 3), (-1, n_prompt), (n_prompt, n_prompt), (1000, n_prompt)):
        r, j = run_json(tmp_path, "-c", 48, "-n", 80, "--context-shift", "--keep", keep)
        n, discarded, kept = shifts(r)
        assert kept == want, (keep, r.stderr.decode())
        assert n >= 1 and discarded == n * ((48 - want) // 2)
        assert len(j["generated_ids"]) == 80 and j["stop"] == "n_predict"


@needs_gemma
def test_keep_adds_the_bos_as_llama_cpp_does(tmp_path):
    bos = GgufHeader(GEMMA).fields["tokenizer.ggml.bos_token_id"]
    r, j = run_json(tmp_path, "-c", 48, "-n", 60, "--context-shift", "--keep", 3, model=GEMMA)
    assert j["prompt_ids"][0] == bos
    assert shifts(r)[2] == 4


@needs_model
def test_a_prompt_kept_whole_that_leaves_nothing_to_discard_stops_with_a_notice(tmp_path):
    _, pj = run_json(tmp_path, "-n", 1)
    n_prompt = len(pj["prompt_ids"])
    r, j = run_json(tmp_path, "-c", n_prompt + 1, "-n", 10, "--context-shift", "--keep", -1)
    assert (f"notice: --context-shift: --keep keeps {n_prompt} of the {n_prompt + 1} positions, "
            "none left to discard") in r.stderr.decode()
    assert j["stop"] == "context full" and len(j["generated_ids"]) == 2
    assert shifts(r)[0] == 0


@pytest.mark.parametrize("args,needle", [
    (["--keep", "-2"], "--keep: -2 is out of range"),
    (["--keep", "abc"], "--keep: 'abc' is not an integer"),
    (["--keep", "1.5"], "--keep: '1.5' is not an integer"),
    (["--keep"], "--keep needs a value"),
    (["--context-shift=1"], "--context-shift takes no value"),
])
@pytest.mark.parametrize("mode", [[], ["-cnv"]])
def test_bad_keep_values_are_usage_errors_before_the_model_loads(args, needle, mode):
    r = minfer("no-such-model.gguf", "hi", *mode, "--context-shift", *args)
    usage_error(r, needle)
    assert "no-such-model" not in r.stderr.decode()


@needs_model
def test_keep_without_context_shift_is_accepted_with_a_notice(tmp_path):
    r, j = run_json(tmp_path, "-c", 32, "-n", 40, "--keep", 5)
    assert "notice: --keep 5: no effect without --context-shift" in r.stderr.decode()
    assert j["stop"] == "context full"


@needs_model
def test_the_conversation_shifts_within_a_reply():
    args = [MODEL, "-cnv", "--greedy", "-t", "2", "--ignore-eos", "-c", 96, "-n", 150]
    plain = minfer(*args, stdin=b"Tell me a long story.\n")
    assert plain.returncode == 0, plain.stderr.decode()
    assert re.search(r"^\[turn 1\] .*, context full$", plain.stderr.decode(), re.M)
    r = minfer(*args, "--context-shift", "--keep", -1, stdin=b"Tell me a long story.\n")
    err = r.stderr.decode()
    assert r.returncode == 0, err
    m = re.search(r"^\[turn 1\] context shift: (\d+) time\(s\), (\d+) token\(s\) discarded, "
                  r"the first (\d+) kept$", err, re.M)
    assert m, err
    assert int(m.group(1)) >= 1
    assert re.search(r"^\[turn 1\] prefill \d+ tokens .* generated 150 tokens .*, n_predict$", err,
                     re.M), err
    # Up to the first shift the reply is the unshifted one.
    assert r.stdout.startswith(plain.stdout.rstrip(b"\n")) and len(r.stdout) > len(plain.stdout)
