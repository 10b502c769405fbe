"""`minfer split` writes llama-gguf-split's parts byte for byte (sha256s recorded by
tools/reference/split_reference.sh in tests/data/split/sha256.tsv; CI has no llama.cpp),
`minfer merge` gives back the input file exactly, minfer runs a model from its first
part with the same output as from the whole file, and bad input is a clear error that
leaves no file behind."""
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


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recorded():
    out = {}
    for line in (TESTDATA / "split" / "sha256.tsv").read_text().splitlines():
        if line.startswith("#"):
            continue
        f = line.split("\t")
        if f[0] == "input":
            out["input"] = f[1]
        else:
            out.setdefault(f[0], {})[f[1]] = f[2]
    return out


REF = recorded()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not FIXTURE_BIN.exists():
        pytest.skip(f"{FIXTURE_BIN} not built")
    out = tmp_path_factory.mktemp("split") / "in.gguf"
    args = shlex.split((TESTDATA / "quantize" / "fixture.args").read_text())
    subprocess.run([str(FIXTURE_BIN), *args, "--vocab",
                    str(TESTDATA / "vocab" / "ggml-vocab-llama-spm.gguf"), "-o", str(out)],
                   check=True, capture_output=True)
    assert sha256(out) == REF["input"], "the fixture generator's output changed; re-record"
    return out


def minfer(*args):
    return subprocess.run([MINFER, *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("mode,flag", [("tensors10", ["--split-max-tensors", "10"]),
                                       ("size20M", ["--split-max-size", "20M"])])
def test_parts_are_llama_gguf_split_bytes_and_merge_round_trips(model, tmp_path, mode, flag):
    r = minfer("split", model, tmp_path / "m", *flag)
    assert r.returncode == 0, r.stderr
    parts = sorted(p.name for p in tmp_path.glob("m-*.gguf"))
    assert parts == ["m" + s for s in sorted(REF[mode])]
    for suffix, want in REF[mode].items():
        assert sha256(tmp_path / ("m" + suffix)) == want, suffix
    first = tmp_path / ("m" + sorted(REF[mode])[0])
    r = minfer("merge", first, tmp_path / "merged.gguf")
    assert r.returncode == 0, r.stderr
    assert sha256(tmp_path / "merged.gguf") == REF["input"]
    assert not list(tmp_path.glob("*.tmp"))


def test_a_split_model_runs_from_its_first_part_like_the_whole_file(model, tmp_path):
    assert minfer("split", model, tmp_path / "m", "--split-max-tensors", "10").returncode == 0
    run = ["hello world", "-n", "8", "--greedy", "--no-template", "-t", "2"]
    whole = minfer(model, *run)
    parts = minfer(tmp_path / "m-00001-of-00004.gguf", *run)
    assert whole.returncode == 0 and parts.returncode == 0, parts.stderr
    assert whole.stdout == parts.stdout and whole.stdout


def test_bad_inputs_are_clear_errors_and_leave_no_file(model, tmp_path):
    merged = tmp_path / "merged.gguf"
    merged.write_bytes(b"x")
    cases = [
        (("split", tmp_path / "missing.gguf", tmp_path / "o"), "missing.gguf"),
        (("split", model, tmp_path / "o", "--split-max-size", "12K"), "followed by M or G"),
        (("split", model, tmp_path / "o", "--split-max-size", "1M", "--split-max-tensors", "3"),
         "not both"),
        (("split", model, tmp_path / "o", "--split-max-size", "1M"), "alone passes"),
        (("split", model), "expected IN.gguf OUT_PREFIX"),
        (("merge", model, tmp_path / "m.gguf"), "not part of a split model"),
        (("merge", model, merged), "exists"),
    ]
    for args, needle in cases:
        r = minfer(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "minfer: error:" in r.stderr and needle in r.stderr, (args, r.stderr)
    assert not list(tmp_path.glob("o-*")) and not (tmp_path / "m.gguf").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_existing_parts_are_replaced_only_with_force_and_merge_never_writes_over_a_part(
        model, tmp_path):
    flag = ["--split-max-tensors", "10"]
    second = tmp_path / "m-00002-of-00004.gguf"
    second.write_bytes(b"keep me")
    r = minfer("split", model, tmp_path / "m", *flag)
    assert r.returncode == 1 and "exists (pass --force" in r.stderr, r.stderr
    # checked before any part is written: nothing new, the old file intact
    assert sorted(p.name for p in tmp_path.glob("m-*")) == [second.name]
    assert second.read_bytes() == b"keep me"
    r = minfer("split", model, tmp_path / "m", *flag, "--force")
    assert r.returncode == 0, r.stderr
    assert sha256(second) == REF["tensors10"]["-00002-of-00004.gguf"]
    first = tmp_path / "m-00001-of-00004.gguf"
    before = sha256(second)
    for extra in ((), ("--force",)):
        r = minfer("merge", first, second, *extra)
        assert r.returncode == 1 and "is the input" in r.stderr, r.stderr
    assert sha256(second) == before
    # a split whose one part would be the input itself is refused, --force or not
    one = tmp_path / "one-00001-of-00001.gguf"
    one.write_bytes(model.read_bytes())
    r = minfer("split", one, tmp_path / "one", "--split-max-tensors", "1000", "--force")
    assert r.returncode == 1 and "is the input" in r.stderr, r.stderr
    assert sha256(one) == REF["input"]
