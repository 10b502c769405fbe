"""`minfer info` on the real SmolLM2-135M-Instruct Q4_1 agrees with the Python `gguf`
package reading the same file: every metadata key, type and value, every tensor's
name, type, shape, byte size and offset, and the totals."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

MINFER = os.environ.get("MINFER_BIN", "minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache/minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

SCALAR_NAMES = {
    gguf.GGUFValueType.UINT8: "u8", gguf.GGUFValueType.INT8: "i8",
    gguf.GGUFValueType.UINT16: "u16", gguf.GGUFValueType.INT16: "i16",
    gguf.GGUFValueType.UINT32: "u32", gguf.GGUFValueType.INT32: "i32",
    gguf.GGUFValueType.FLOAT32: "f32", gguf.GGUFValueType.BOOL: "bool",
    gguf.GGUFValueType.STRING: "string", gguf.GGUFValueType.UINT64: "u64",
    gguf.GGUFValueType.INT64: "i64", gguf.GGUFValueType.FLOAT64: "f64",
}


def field_value(field):
    """Decode a ReaderField into Python values (arrays as lists)."""
    t = field.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        et = field.types[-1]
        out = []
        for idx in field.data:
            part = field.parts[idx]
            out.append(bytes(part).decode("utf-8", errors="replace")
                       if et == gguf.GGUFValueType.STRING else part.tolist()[0])
        return out
    part = field.parts[field.data[0]]
    if t == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8", errors="replace")
    v = part.tolist()[0]
    return bool(v) if t == gguf.GGUFValueType.BOOL else v


@pytest.fixture(scope="module")
def info():
    if not MODEL.exists():
        pytest.skip(f"default model missing: {MODEL} (run scripts/setup.sh)")
    out = subprocess.run([MINFER, "info", str(MODEL), "--json"], check=True,
                         capture_output=True).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def reader():
    return gguf.GGUFReader(str(MODEL), "r")


def test_metadata_keys_types_and_values_match_gguf_package(info, reader):
    ours = info["metadata"]
    theirs = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.keys()) == list(theirs.keys())
    for key, field in theirs.items():
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            et = field.types[-1]
            expected_type = f"arr[{SCALAR_NAMES[et]},{len(field.data)}]"
        else:
            expected_type = SCALAR_NAMES[t]
        assert ours[key]["type"] == expected_type, key
        expected = field_value(field)
        got = ours[key]["value"]
        if isinstance(expected, float):
            assert got == pytest.approx(expected, rel=0, abs=0), key
        elif isinstance(expected, list) and expected and isinstance(expected[0], float):
            np.testing.assert_array_equal(np.array(got, dtype=np.float64),
                                          np.array(expected, dtype=np.float64), err_msg=key)
        else:
            assert got == expected, key


def test_tensor_table_matches_gguf_package(info, reader):
    ours = info["tensors"]
    assert len(ours) == len(reader.tensors)
    for t_ours, t in zip(ours, reader.tensors):
        assert t_ours["name"] == t.name
        assert t_ours["type"].lower() == t.tensor_type.name.lower()
        assert t_ours["shape"] == [int(x) for x in t.shape]
        assert t_ours["n_elements"] == int(t.n_elements)
        assert t_ours["n_bytes"] == int(t.n_bytes)
        assert t_ours["offset"] + reader.data_offset == int(t.data_offset)


def test_totals_and_header(info, reader):
    assert info["version"] == 3
    assert info["architecture"] == "llama"
    assert info["totals"]["tensors"] == len(reader.tensors)
    assert info["totals"]["params"] == sum(int(t.n_elements) for t in reader.tensors)
    assert info["totals"]["bytes"] == sum(int(t.n_bytes) for t in reader.tensors)


def test_text_output_names_architecture_and_every_tensor(reader):
    if not MODEL.exists():
        pytest.skip("default model missing")
    out = subprocess.run([MINFER, "info", str(MODEL)], check=True, capture_output=True,
                         text=True).stdout
    assert "architecture: llama" in out
    for t in reader.tensors:
        assert t.name in out
    assert f"totals: {len(reader.tensors)} tensors" in out


def test_missing_file_is_a_clear_error_and_nonzero_exit(tmp_path):
    r = subprocess.run([MINFER, "info", str(tmp_path / "nope.gguf")], capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert "not found" in r.stderr
    assert r.stdout == ""


def test_bad_flag_is_refused(tmp_path):
    r = subprocess.run([MINFER, "info", "--bogus"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "bogus" in r.stderr
