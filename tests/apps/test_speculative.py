"""Stage 18 tests (the command line): speculative decoding (--spec-ngram, -md, --draft-max,
--draft-min, --draft-p-min) on the real binary and SmolLM2; skipped when the model cache
lacks it. Bars: with and without speculation the run prints the same bytes and the same
token ids — greedy on 12 prompts under both numerics, sampled with a seed — while the
stderr statistics show drafts accepted (so the verifying batches ran); a draft model
made by `minfer quantize` drafts and is verified likewise; a draft model with another
vocabulary (Gemma 3) is an error naming the difference; usage errors come before the model
loads."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
RAW = ["--no-template", "-t", "2", "--ignore-eos"]

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")

# Text that repeats (prompt lookup accepts much of it) and text that does not.
TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", "tests/data"))
PROMPTS = json.loads((TESTDATA / "speculative" / "prompts.json").read_text())["prompts"]

STATS = re.compile(r"^speculative: drafted (\d+) tokens, accepted (\d+) \(([\d.]+)%\), (\d+) forwards "
                   r"for (\d+) tokens \(([\d.]+) per forward; (\d+) verified a draft\)$", re.M)


def minfer(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, timeout=300)


def run(tmp_path, prompt, *args, model=MODEL):
    out = tmp_path / "run.json"
    r = minfer(model, prompt, *RAW, "--dump-json", out, *args)
    assert r.returncode == 0, r.stderr.decode()
    return r, json.loads(out.read_text())["generated_ids"]


def stats(r):
    m = STATS.search(r.stderr.decode())
    assert m, r.stderr.decode()
    drafted, accepted, _, forwards, tokens, _, verified = (int(float(g)) for g in m.groups())
    return {"drafted": drafted, "accepted": accepted, "forwards": forwards, "tokens": tokens,
            "verified": verified}


def usage_error(r, needle):
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert err.startswith("minfer: error: ") and needle in err, err
    assert r.stdout == b""


def greedy_same_with_ngram(tmp_path, numerics, prompts):
    # Some of the prompts through the binary (tests/engine's speculative_test runs all 12
    # in process under both numerics, comparing every sampled row's logits too).
    accepted = 0
    for p in prompts:
        plain, ids = run(tmp_path, p, "--greedy", "-n", 40, "--numerics", numerics)
        assert "speculative:" not in plain.stderr.decode()
        spec, spec_ids = run(tmp_path, p, "--greedy", "-n", 40, "--numerics", numerics,
                             "--spec-ngram", 2, "--draft-max", 8)
        assert spec.stdout == plain.stdout, p
        assert spec_ids == ids, p
        s = stats(spec)
        assert s["tokens"] == 40 and s["accepted"] <= s["drafted"]
        assert s["forwards"] <= 39  # the plain run's: one per token but the last
        accepted += s["accepted"]
    assert accepted > 8 * len(prompts)


@needs_model
def test_greedy_ngram_prints_the_plain_runs_bytes_default_numerics(tmp_path):
    greedy_same_with_ngram(tmp_path, "default", PROMPTS[::2])


@needs_model
def test_greedy_ngram_prints_the_plain_runs_bytes_llamacpp_numerics(tmp_path):
    greedy_same_with_ngram(tmp_path, "llamacpp", PROMPTS[::3])


@needs_model
def test_a_repeating_text_is_drafted_from_its_history_and_accepted(tmp_path):
    # The model goes on repeating the sentence at first: prompt lookup drafts it.
    p = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
    plain, ids = run(tmp_path, p, "--greedy", "-n", 96)
    r, spec_ids = run(tmp_path, p, "--greedy", "-n", 96, "--spec-ngram", 3)
    assert r.stdout == plain.stdout and spec_ids == ids
    assert r.stdout.startswith(b" The cat sat on the mat. The cat sat on the mat.")
    s = stats(r)
    assert s["tokens"] == 96 and s["verified"] > 0 and s["accepted"] <= s["drafted"]
    # At least the repeated sentences came from drafts: fewer forwards than tokens.
    assert s["accepted"] >= 20, r.stderr.decode()
    assert s["forwards"] == 95 - s["accepted"], r.stderr.decode()


@needs_model
def test_seeded_sampling_with_speculation_is_the_plain_runs_output(tmp_path):
    for p in PROMPTS[:3]:
        args = ["--temp", "0.8", "-s", "42", "-n", 40]
        plain, ids = run(tmp_path, p, *args)
        a, a_ids = run(tmp_path, p, *args, "--spec-ngram", 1)
        b, b_ids = run(tmp_path, p, *args, "--spec-ngram", 1)
        assert a.stdout == b.stdout == plain.stdout, p
        assert a_ids == b_ids == ids
        assert stats(a)["drafted"] > 0


@needs_model
def test_a_quantized_draft_model_drafts_and_the_output_is_the_plain_runs(tmp_path):
    draft = tmp_path / "draft-q4_0.gguf"
    q = minfer("quantize", MODEL, draft, "Q4_0", "--allow-requantize", "-t", 2)
    assert q.returncode == 0, q.stderr.decode()
    total = {"drafted": 0, "accepted": 0}
    # The draft runs with -t's threads, or -td's (its own pool: the output cannot change).
    for p, td in [(PROMPTS[7], None), (PROMPTS[8], 1), (PROMPTS[3], 2)]:
        plain, ids = run(tmp_path, p, "--greedy", "-n", 32)
        # --draft-p-min 0: every draft runs to --draft-max, so some are wrong and rolled back.
        r, spec_ids = run(tmp_path, p, "--greedy", "-n", 32, "-md", draft, "--draft-max", 6,
                          "--draft-p-min", 0, *(["-td", td] if td else []))
        assert r.stdout == plain.stdout, p
        assert spec_ids == ids, p
        err = r.stderr.decode()
        assert re.search(r"^draft model: \d+ forwards in [\d.]+ s$", err, re.M), err
        threads = re.search(r"^Draft model: .*, threads (\d+)$", err, re.M)
        assert threads and int(threads.group(1)) == (td or 2), err
        s = stats(r)
        total["drafted"] += s["drafted"]
        total["accepted"] += s["accepted"]
    assert total["accepted"] > 0
    # The requantized draft disagrees now and then: rows were rolled back in both contexts.
    assert total["accepted"] < total["drafted"]


@needs_model
@pytest.mark.skipif(not GEMMA.exists(), reason=f"{GEMMA} not present")
def test_a_draft_model_with_another_vocabulary_is_an_error(tmp_path):
    r = minfer(MODEL, "Hi", *RAW, "-n", 4, "-md", GEMMA)
    err = r.stderr.decode()
    assert r.returncode == 1 and r.stdout == b"", err
    assert err.splitlines()[-1] == (
        "minfer: error: the draft model's vocabulary differs from the target's: the draft's "
        "tokenizer model is 'llama', the target's 'gpt2' (a draft model must share the target's "
        "tokenizer)"), err


def test_usage_errors_before_the_model_loads(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    usage_error(minfer(missing, "Hi", "--spec-ngram", 2, "-md", missing),
                "give --spec-ngram or -md (--model-draft), not both")
    usage_error(minfer(missing, "Hi", "--spec-ngram", 2, "--draft-min", 9, "--draft-max", 4),
                "--draft-min 9 is above --draft-max 4")
    usage_error(minfer(missing, "Hi", "--draft-max", 0), "--draft-max")
    usage_error(minfer(missing, "Hi", "--draft-p-min", 1.5), "--draft-p-min")
    usage_error(minfer(missing, "Hi", "--spec-ngram", -1), "--spec-ngram")
    # llama.cpp's current spellings of the same flags.
    usage_error(minfer(missing, "Hi", "--spec-ngram", 2, "--spec-draft-n-min", 9,
                       "--spec-draft-n-max", 4), "--draft-min 9 is above --draft-max 4")
    usage_error(minfer(missing, "Hi", "--spec-draft-p-min", 2), "--draft-p-min")
    usage_error(minfer(missing, "Hi", "--spec-draft-threads", 1), "-td 1: there is no draft model")
    usage_error(minfer(missing, "Hi", "-td", 1), "-td 1: there is no draft model (give -md PATH)")
    usage_error(minfer(missing, "Hi", "-md", missing, "-td", "x"), "-td")


@needs_model
def test_the_conversation_mode_refuses_speculation():
    r = minfer(MODEL, "-cnv", "-st", "--spec-ngram", 2)
    usage_error(r, "speculative decoding (--spec-ngram, -md) runs single-shot generation, not -cnv")
