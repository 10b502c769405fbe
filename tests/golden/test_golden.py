"""Model goldens: our engine against llama.cpp on the same GGUF (docs/ARCHITECTURE.md §5).

Runs without llama.cpp: the goldens in tests/data/golden/<model>/ were recorded by
tools/reference/llamacpp_goldens.py and are committed. The tiny models are
regenerated here with minfer-model-fixture and must hash to the committed sha256
(tools/reference/test_models.tsv), so the goldens describe exactly the file we run.
The larger models (SmolLM2, the Qwen2.5-0.5B-shaped fixtures) come from the model
cache (scripts/setup.sh, tools/make_test_models.sh); their tests skip when absent.

Engine contract (apps/minfer), detected from `minfer --help`:
  generation   `minfer MODEL PROMPT --no-template --temp 0 -n N` prints the greedy
               continuation (special tokens in PROMPT parsed, BOS as the vocab says)
  dumps        `... --dump-json OUT.json --dump-logits OUT.f32` additionally writes
               {"prompt_ids": [...], "generated_ids": [...], "stopped_at_eog": bool}
               and the raw little-endian f32 logits of every step (step 0 = last prompt
               position; n_vocab floats per step, including the step that chose EOG).
Without generation the comparisons skip with a message; with it, any disagreement
beyond the named tolerances below fails and prints the first mismatch.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import json
import math
import os
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "data" / "golden"
MANIFEST = ROOT / "tools" / "reference" / "test_models.tsv"
BUILD = Path(os.environ.get("MINFER_BUILD_DIR", ROOT / "build"))
TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", ROOT.parent / "shared" / "testdata"))
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
FIXTURE_BIN = BUILD / "tools" / "model_fixture" / "minfer-model-fixture"
MINFER_BIN = Path(os.environ.get("MINFER_BIN", BUILD / "apps" / "minfer" / "minfer"))

# Tolerances, each with its cause.
# Float weights (f32/f16/bf16): llama.cpp keeps the KV cache in f16, rounds activations
# to f16 for F16 matmuls and runs flash attention with f16 K/V; an engine that rounds
# at the same points differs only by summation order.
kLogitAbsTolFloat = 2e-2
# Quantized weights: llama.cpp quantizes activations to Q8_0/Q8_K blocks before the
# dot products (vec_dot_type); an engine that quantizes activations the same way
# lands well inside this, one that keeps them in f32 lands near its edge.
kLogitAbsTolQuant = 1e-1
# The committed full-logit vectors are stored as IEEE half floats: relative rounding
# of 2^-11 on top of the tolerance above.
kF16StorageRelTol = 2.0 ** -11
# A greedy step whose golden top-1/top-2 gap is below this many tolerances is a near
# tie: a different choice there is not an error, and the run is compared only up to it.
kNearTieGapInTols = 2.0


def manifest() -> dict[str, dict]:
    rows = {}
    with open(MANIFEST, encoding="utf-8") as f:
        lines = [ln for ln in f if ln.strip() and not ln.startswith("#")]
    for r in csv.reader(lines, delimiter="\t"):
        name, arch, preset, typ, vocab, seed, sha = r
        rows[name] = dict(name=name, arch=arch, preset=preset, type=typ, vocab=vocab, seed=seed, sha256=sha)
    return rows


def tiny_models() -> list[dict]:
    return [m for m in manifest().values() if m["preset"] == "tiny"]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fixture_args(m: dict, out: Path, threads: int = 2) -> list[str]:
    # The same arguments as tools/make_test_models.sh.
    vocab = TESTDATA / "vocab" / f"ggml-vocab-{m['vocab']}.gguf"
    return [str(FIXTURE_BIN), "--arch", m["arch"], "--preset", m["preset"], "--type", m["type"],
            "--seed", m["seed"], "--vocab", str(vocab), "--name", f"minfer fixture {m['name']}",
            "--threads", str(threads), "-o", str(out)]


_generated: dict[str, Path] = {}


def tiny_model_path(name: str) -> Path:
    """Regenerates a tiny fixture model into the build tree (once per session)."""
    if name in _generated:
        return _generated[name]
    if not FIXTURE_BIN.exists():
        pytest.skip(f"{FIXTURE_BIN} is not built")
    out_dir = BUILD / "golden_models"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"minfer-fixture-{name}.gguf"
    subprocess.run(fixture_args(manifest()[name], out), check=True, capture_output=True)
    _generated[name] = out
    return out


def golden_dirs() -> list[Path]:
    return sorted(p.parent for p in GOLDEN_DIR.glob("*/golden.json"))


def load_golden(d: Path) -> dict:
    return json.loads((d / "golden.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- fixture tool


@pytest.mark.parametrize("m", tiny_models(), ids=lambda m: m["name"])
def test_tiny_fixture_hash_matches_goldens(m):
    path = tiny_model_path(m["name"])
    got = sha256(path)
    assert m["sha256"] != "-", f"{m['name']}: no sha256 recorded in {MANIFEST}"
    assert got == m["sha256"], (
        f"{m['name']}: minfer-model-fixture wrote sha256 {got}, the manifest records {m['sha256']}: the "
        "generator, the GGUF writer, a quantizer or the vocabulary changed; regenerate the goldens "
        "(tests/data/golden/README.md) if the change is intended")
    g = GOLDEN_DIR / m["name"] / "golden.json"
    if g.exists():
        assert load_golden(g.parent)["model"]["sha256"] == got, f"{g} was recorded on another file"


def test_fixture_bytes_independent_of_thread_count(tmp_path):
    m = manifest()["tiny-qwen2-q4_k_m"]
    one, many = tmp_path / "t1.gguf", tmp_path / "t5.gguf"
    if not FIXTURE_BIN.exists():
        pytest.skip(f"{FIXTURE_BIN} is not built")
    subprocess.run(fixture_args(m, one, threads=1), check=True, capture_output=True)
    subprocess.run(fixture_args(m, many, threads=5), check=True, capture_output=True)
    assert sha256(one) == sha256(many)


def test_qwen05b_q4_k_m_plan_follows_llama_quantize():
    """Per-tensor types of the Qwen2.5-0.5B Q4_K_M mix, as llama-quantize picks them
    (llama-quant.cpp): n_embd 896 is not a multiple of 256, so Q4_K rows of 896 fall
    back to Q5_0 and Q6_K ones to Q8_0; the tied embedding takes the output's Q6_K → Q8_0;
    attn_v and ffn_down use Q6_K on use_more_bits layers."""
    if not FIXTURE_BIN.exists():
        pytest.skip(f"{FIXTURE_BIN} is not built")
    vocab = TESTDATA / "vocab" / "ggml-vocab-qwen2.gguf"
    out = subprocess.run([str(FIXTURE_BIN), "--preset", "qwen2.5-0.5b", "--type", "q4_k_m", "--vocab",
                          str(vocab), "--print-plan"], check=True, capture_output=True, text=True).stdout
    types = {ln.split()[0]: ln.split()[1] for ln in out.splitlines()}
    more_bits = [i for i in range(24) if i < 3 or i >= 21 or (i - 3) % 3 == 2]
    assert types["token_embd.weight"] == "q8_0"
    assert "output.weight" not in types
    for i in range(24):
        assert types[f"blk.{i}.attn_q.weight"] == "q5_0"
        assert types[f"blk.{i}.attn_q.bias"] == "f32"
        assert types[f"blk.{i}.attn_v.weight"] == ("q8_0" if i in more_bits else "q5_0"), i
        assert types[f"blk.{i}.ffn_down.weight"] == ("q6_K" if i in more_bits else "q4_K"), i
        assert types[f"blk.{i}.ffn_up.weight"] == "q5_0"


# ---------------------------------------------------------------- engine vs goldens


def engine_caps() -> dict:
    if not MINFER_BIN.exists():
        return {"generate": False, "dump": False, "why": f"{MINFER_BIN} is not built"}
    r = subprocess.run([str(MINFER_BIN), "--help"], capture_output=True, text=True)
    h = r.stdout + r.stderr
    gen = "--temp" in h and "--no-template" in h
    dump = gen and "--dump-logits" in h and "--dump-json" in h
    why = "" if gen else "`minfer --help` shows no generation (--temp, --no-template): engine not there yet"
    return {"generate": gen, "dump": dump, "why": why}


def model_for(golden: dict) -> Path:
    fx = golden["model"].get("fixture")
    if fx and manifest().get(fx, {}).get("preset") == "tiny":
        return tiny_model_path(fx)
    p = CACHE / "models" / golden["model"]["file"]
    if not p.exists():
        pytest.skip(f"{p} is missing: run scripts/setup.sh and tools/make_test_models.sh")
    return p


def tolerance(golden: dict) -> float:
    fx = golden["model"].get("fixture")
    typ = manifest()[fx]["type"] if fx else golden["model"]["file"].rsplit(".", 2)[-2].lower()
    return kLogitAbsTolFloat if typ in ("f32", "f16", "bf16") else kLogitAbsTolQuant


def read_f16(path: Path, offset: int, count: int) -> list[float]:
    with open(path, "rb") as f:
        f.seek(offset * 2)
        return list(struct.unpack(f"<{count}e", f.read(count * 2)))


def run_engine(model: Path, prompt: dict, n: int, dump: bool, tmp: Path):
    args = [str(MINFER_BIN), str(model), prompt["text"], "--no-template", "--temp", "0", "-n", str(n)]
    if dump:
        args += ["--dump-json", str(tmp / "out.json"), "--dump-logits", str(tmp / "out.f32")]
    r = subprocess.run(args, capture_output=True, timeout=600)
    assert r.returncode == 0, f"minfer failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}"
    return r.stdout


def compare_prompt(golden: dict, gdir: Path, p: dict, model: Path, caps: dict, tmp: Path) -> list[str]:
    """Returns notes; raises AssertionError on a real mismatch."""
    notes = []
    tol = tolerance(golden)
    n = golden["settings"]["n_predict"]
    stdout = run_engine(model, p, n, caps["dump"], tmp)
    want_text = base64.b64decode(p["generated_text_b64"])
    if not caps["dump"]:
        # Text tier: the printed continuation (a prompt echo before it is allowed).
        assert stdout.endswith(want_text) or stdout.rstrip(b"\n").endswith(want_text.rstrip(b"\n")), (
            f"{gdir.name}/{p['name']}: greedy text differs\n want {want_text!r}\n got  {stdout!r}")
        return notes
    out = json.loads((tmp / "out.json").read_text())
    assert out["prompt_ids"] == p["prompt_ids"], (
        f"{gdir.name}/{p['name']}: prompt ids differ\n want {p['prompt_ids']}\n got  {out['prompt_ids']}")
    n_vocab = golden["model"]["n_vocab"]
    raw = (tmp / "out.f32").read_bytes()
    n_steps = len(raw) // (4 * n_vocab)

    def step_logits(k: int) -> list[float]:
        return list(struct.unpack_from(f"<{n_vocab}f", raw, 4 * n_vocab * k))

    if "full_logits" in p:
        want = read_f16(gdir / "logits.f16", p["full_logits"]["offset"], p["full_logits"]["count"])
        got = step_logits(0)
        worst = max(range(n_vocab), key=lambda i: abs(got[i] - want[i]) - kF16StorageRelTol * abs(want[i]))
        err = abs(got[worst] - want[worst])
        assert err <= tol + kF16StorageRelTol * abs(want[worst]), (
            f"{gdir.name}/{p['name']}: last-prompt logits differ: id {worst} want {want[worst]:.5f} "
            f"got {got[worst]:.5f} (|diff| {err:.5f} > tol {tol})")
    want_ids, got_ids = p["generated_ids"], out["generated_ids"]
    for k, step in enumerate(p["steps"]):
        if k >= n_steps:
            break
        got = step_logits(k)
        for tid, tval in zip(step["top_ids"], step["top_logits"]):
            assert abs(got[tid] - tval) <= tol, (
                f"{gdir.name}/{p['name']} step {k}: logit of id {tid} want {tval:.5f} got {got[tid]:.5f} "
                f"(tol {tol})")
        want_tok = want_ids[k] if k < len(want_ids) else p["eog_id"]
        got_tok = got_ids[k] if k < len(got_ids) else None
        if got_tok != want_tok:
            gap = step["top_logits"][0] - step["top_logits"][1]
            assert gap < kNearTieGapInTols * tol, (
                f"{gdir.name}/{p['name']}: first greedy mismatch at step {k}: want {want_tok} got {got_tok} "
                f"(golden top-2 gap {gap:.4f})\n want {want_ids}\n got  {got_ids}")
            notes.append(f"{p['name']}: near tie at step {k} (gap {gap:.4f}); compared up to it")
            return notes
    assert got_ids == want_ids, f"{gdir.name}/{p['name']}: generated ids differ\n want {want_ids}\n got  {got_ids}"
    assert bool(out["stopped_at_eog"]) == p["stopped_at_eog"], f"{gdir.name}/{p['name']}: EOG stop differs"
    return notes


@pytest.mark.parametrize("gdir", golden_dirs(), ids=lambda d: d.name)
def test_engine_matches_llamacpp(gdir):
    caps = engine_caps()
    if not caps["generate"]:
        pytest.skip(caps["why"])
    golden = load_golden(gdir)
    model = model_for(golden)
    if golden["model"].get("fixture") is None and sha256(model) != golden["model"]["sha256"]:
        pytest.skip(f"{model} is not the file the goldens were recorded on (sha256 differs)")
    notes = []
    for p in golden["prompts"]:
        with tempfile.TemporaryDirectory() as t:
            notes += compare_prompt(golden, gdir, p, model, caps, Path(t))
    for n in notes:
        print(n)


def test_goldens_are_well_formed():
    dirs = golden_dirs()
    assert dirs, f"no goldens under {GOLDEN_DIR}"
    total = 0
    for d in dirs:
        g = load_golden(d)
        total += sum(f.stat().st_size for f in d.iterdir())
        for p in g["prompts"]:
            assert len(p["steps"]) == len(p["generated_ids"]) + (1 if p["stopped_at_eog"] else 0), d
            for s, tok in zip(p["steps"], p["generated_ids"]):
                assert s["top_ids"][0] == tok, (d, p["name"])
                assert all(math.isfinite(v) for v in s["top_logits"])
            if "full_logits" in p:
                vals = read_f16(d / "logits.f16", p["full_logits"]["offset"], p["full_logits"]["count"])
                best = max(range(len(vals)), key=lambda i: vals[i])
                assert vals[best] == pytest.approx(p["steps"][0]["top_logits"][0], abs=0.02)
    assert total < 4 << 20, f"committed goldens grew to {total} bytes"
