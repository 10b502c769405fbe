"""`minfer quantize` writes the same bytes as llama.cpp's llama-quantize: for every TYPE,
the sha256 of our output on a generated llama fixture (rows of 288 — not a multiple of
256, so the k-quant fallbacks apply — and ffn_down rows of 768, k-quants proper) equals
the sha256 of llama-quantize's output, recorded by tools/reference/quantize_identity.sh
--record in tests/data/quantize/sha256.tsv (CI has no llama.cpp). Bad input is a clear
error with exit code 1 and leaves no output file."""
import hashlib
import os
import shlex
import subprocess
from pathlib import Path

import pytest

MINFER = os.environ.get("MINFER_BIN", "minfer")
BUILD = Path(os.environ.get("MINFER_BUILD_DIR", "build"))
TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", "tests/data"))
FIXTURE_BIN = BUILD / "tools" / "model_fixture" / "minfer-model-fixture"
QDATA = TESTDATA / "quantize"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def recorded():
    out = {}
    for line in (QDATA / "sha256.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            k, v = line.split("\t")
            out[k] = v
    return out


REF = recorded()
TYPES = [t for t in REF if t != "input"]
# Under ASan (minutes of reference k-quant work at -O1) one type per quantizer family.
SANITIZE = os.environ.get("MINFER_SANITIZE", "0") in ("1", "ON", "TRUE", "true")
RUN_TYPES = ["Q4_0", "Q3_K_M", "Q4_K_M", "Q6_K", "BF16"] if SANITIZE else TYPES


@pytest.fixture(scope="module")
def fixture_model(tmp_path_factory):
    if not FIXTURE_BIN.exists():
        pytest.skip(f"{FIXTURE_BIN} not built")
    out = tmp_path_factory.mktemp("q") / "fixture-f16.gguf"
    args = shlex.split((QDATA / "fixture.args").read_text())
    subprocess.run([str(FIXTURE_BIN), *args, "--vocab",
                    str(TESTDATA / "vocab" / "ggml-vocab-llama-spm.gguf"), "-o", str(out)],
                   check=True, capture_output=True)
    assert sha256(out) == REF["input"], "the fixture generator's output changed; re-record"
    return out


def quantize(*args):
    return subprocess.run([MINFER, "quantize", *map(str, args)], capture_output=True, text=True)


def test_every_type_is_recorded():
    assert TYPES == ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M",
                     "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "F16", "BF16",
                     "F32"]


@pytest.mark.parametrize("qtype", RUN_TYPES)
def test_output_is_byte_identical_to_llama_quantize(fixture_model, tmp_path, qtype):
    out = tmp_path / f"{qtype}.gguf"
    r = quantize(fixture_model, out, qtype, "-t", "2")
    assert r.returncode == 0, r.stderr
    assert sha256(out) == REF[qtype]
    # one progress line per tensor, in llama-quantize's form
    lines = [l for l in r.stdout.splitlines() if l.startswith("[")]
    assert len(lines) == 39 and lines[0].startswith("[   1/  39] output.weight")
    assert not list(tmp_path.glob("*.tmp"))


def test_bytes_do_not_depend_on_the_thread_count(fixture_model, tmp_path):
    for t in ("1", "3"):
        r = quantize(fixture_model, tmp_path / f"t{t}.gguf", "q4_k_m", "-t", t)
        assert r.returncode == 0, r.stderr
        assert sha256(tmp_path / f"t{t}.gguf") == REF["Q4_K_M"]


def test_pure_and_type_overrides_set_those_tensors(fixture_model, tmp_path):
    gguf = pytest.importorskip("gguf")
    out = tmp_path / "o.gguf"
    r = quantize(fixture_model, out, "Q4_K_M", "--pure", "--output-tensor-type", "q8_0",
                 "--token-embedding-type", "f16")
    assert r.returncode == 0, r.stderr
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    assert types["output.weight"] == "Q8_0"
    assert types["token_embd.weight"] == "F16"
    # --pure: no Q6_K bumps; 768-wide ffn_down rows stay Q4_K, 288-wide ones fall back
    assert types["blk.0.ffn_down.weight"] == "Q4_K"
    assert types["blk.0.attn_v.weight"] == "Q5_0"
    assert types["blk.0.attn_norm.weight"] == "F32"


def test_bad_inputs_are_clear_errors_and_leave_no_file(fixture_model, tmp_path):
    out = tmp_path / "out.gguf"
    cases = [
        ((tmp_path / "missing.gguf", out, "Q4_0"), "missing.gguf"),
        ((fixture_model, out, "Q9_9"), "unknown TYPE 'Q9_9'"),
        ((fixture_model, out), "expected IN.gguf OUT.gguf TYPE"),
        ((fixture_model, tmp_path / "no" / "dir.gguf", "Q4_0"), "dir.gguf"),
        ((fixture_model, out, "Q4_0", "--output-tensor-type", "q7"), "--output-tensor-type: 'q7'"),
    ]
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(fixture_model.read_bytes()[:100000])
    cases.append(((truncated, out, "Q4_0"), "truncated.gguf"))
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 10)
    cases.append(((garbage, out, "Q4_0"), "garbage.gguf"))
    for args, needle in cases:
        r = quantize(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "minfer: error:" in r.stderr and needle in r.stderr, (args, r.stderr)
        assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_requantizing_a_quantized_model_is_refused(fixture_model, tmp_path):
    q = tmp_path / "q4_0.gguf"
    assert quantize(fixture_model, q, "Q4_0").returncode == 0
    r = quantize(q, tmp_path / "again.gguf", "Q8_0")
    assert r.returncode == 1 and "requantizing" in r.stderr and "--allow-requantize" in r.stderr
    assert not (tmp_path / "again.gguf").exists()


def test_requantizing_needs_allow_requantize_and_equals_quantizing_the_dequantized_model(
        fixture_model, tmp_path):
    q8 = tmp_path / "q8_0.gguf"
    assert quantize(fixture_model, q8, "Q8_0").returncode == 0
    r = quantize(q8, tmp_path / "refused.gguf", "Q4_0")
    assert r.returncode == 1 and "--allow-requantize" in r.stderr
    # Requantizing dequantizes each quantized tensor to F32 first, as llama-quantize does:
    # the same bytes as dequantizing the whole model, then quantizing it.
    direct = tmp_path / "direct.gguf"
    r = quantize(q8, direct, "Q4_0", "--allow-requantize")
    assert r.returncode == 0, r.stderr
    assert "WARNING: requantizing" in r.stderr
    f32 = tmp_path / "f32.gguf"
    assert quantize(q8, f32, "F32", "--allow-requantize").returncode == 0
    via_f32 = tmp_path / "via_f32.gguf"
    assert quantize(f32, via_f32, "Q4_0").returncode == 0
    assert sha256(direct) == sha256(via_f32)
    assert sha256(direct) != REF["Q4_0"]  # two roundings are not one


def test_output_that_is_the_input_is_refused_through_links_even_with_force(fixture_model, tmp_path):
    src = tmp_path / "model.gguf"
    src.write_bytes(fixture_model.read_bytes())
    sym = tmp_path / "sym.gguf"
    sym.symlink_to(src)
    hard = tmp_path / "hard.gguf"
    os.link(src, hard)
    for out in (src, sym, hard):
        for extra in ((), ("--force",)):
            r = quantize(src, out, "Q4_0", *extra)
            assert r.returncode == 1, (out, extra, r.stderr)
            assert "is the input" in r.stderr, r.stderr
    assert sha256(src) == REF["input"]
    assert not list(tmp_path.glob("*.tmp"))


def test_existing_output_is_replaced_only_with_force(fixture_model, tmp_path):
    out = tmp_path / "out.gguf"
    out.write_bytes(b"keep me")
    r = quantize(fixture_model, out, "Q4_0")
    assert r.returncode == 1 and "exists (pass --force" in r.stderr, r.stderr
    assert out.read_bytes() == b"keep me"
    r = quantize(fixture_model, out, "Q4_0", "--force")
    assert r.returncode == 0, r.stderr
    assert sha256(out) == REF["Q4_0"]
