"""Stage 2 tests: our GGUF writer and reader against the Python `gguf` package.

Bar: every metadata value, tensor name, type, shape, offset and data byte that one
side writes, the other reads identically (exact equality, floats compared as f32/f64).
The C++ side is tools/gguf_fixture (`write` a sample, `dump` any file as JSON).
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGUFReader, GGUFValueType, GGUFWriter  # noqa: E402

BUILD = Path(os.environ.get("MINFER_BUILD_DIR", "build/gguf"))
FIXTURE = BUILD / "tools" / "gguf_fixture" / "gguf_fixture"


def run_fixture(*args):
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE} not built")
    r = subprocess.run([str(FIXTURE), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def dump(path):
    return json.loads(run_fixture("dump", path))


def flatten(v):
    if isinstance(v, list):
        out = []
        for e in v:
            out.extend(flatten(e))
        return out
    return [v]


def python_view(path):
    """(metadata dict key -> (types, value), tensors list) as GGUFReader sees them."""
    r = GGUFReader(path)
    kvs = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        kvs[name] = ([int(t) for t in field.types], field.contents())
    tensors = [
        dict(
            name=t.name,
            type=int(t.tensor_type),
            dims=[int(d) for d in t.shape],
            offset=int(t.data_offset),
            n_bytes=int(t.n_bytes),
            data_hex=np.asarray(t.data).tobytes().hex(),
        )
        for t in r.tensors
    ]
    return r, kvs, tensors


def assert_same(path):
    ours = dump(path)
    reader, kvs, tensors = python_view(path)
    assert [kv["key"] for kv in ours["metadata"]] == list(kvs.keys())
    for kv in ours["metadata"]:
        types, value = kvs[kv["key"]]
        assert types[0] == kv["type"], kv["key"]
        if kv["type"] == int(GGUFValueType.ARRAY):
            if len(types) > 1:  # an empty array has no element type in GGUFReader's view
                assert types[1] == kv["array_type"], kv["key"]
            # GGUFReader flattens nested arrays.
            assert flatten(kv["value"]) == value, kv["key"]
        elif kv["type"] == int(GGUFValueType.FLOAT32):
            assert np.float32(kv["value"]) == np.float32(value), kv["key"]
        else:
            assert kv["value"] == value, kv["key"]
    assert len(ours["tensors"]) == len(tensors)
    for ot, pt in zip(ours["tensors"], tensors):
        assert ot["name"] == pt["name"]
        assert ot["type"] == pt["type"], ot["name"]
        assert ot["dims"] == pt["dims"], ot["name"]
        assert ours["data_offset"] + ot["offset"] == pt["offset"], ot["name"]
        assert ot["n_bytes"] == pt["n_bytes"], ot["name"]
        assert ot["data_hex"] == pt["data_hex"], ot["name"]
    return ours, kvs


def test_our_writer_reads_identically_in_python(tmp_path):
    path = tmp_path / "ours.gguf"
    run_fixture("write", path)
    ours, kvs = assert_same(path)
    # Spot-check absolute values too, so that a shared misreading cannot pass.
    assert kvs["general.alignment"][1] == 64
    assert kvs["t.u64"][1] == 2**64 - 1
    assert kvs["t.i64"][1] == -(2**63)
    assert kvs["t.f32"][1] == pytest.approx(0.1, rel=1e-7)
    assert kvs["t.arr_str"][1] == ["a", "", "bc\n", "ü"]
    assert kvs["t.arr_nested"][0] == [int(GGUFValueType.ARRAY)] * 2 + [int(GGUFValueType.INT32)]
    assert kvs["general.name"][1] == 'fixture "quoted" ünïcødé 日本'
    assert ours["version"] == 3
    assert len(ours["tensors"]) == 7


def test_python_writer_parses_identically_in_ours(tmp_path):
    path = tmp_path / "py.gguf"
    w = GGUFWriter(str(path), "qwen2")
    w.add_uint8("p.u8", 250)
    w.add_int8("p.i8", -7)
    w.add_uint16("p.u16", 65000)
    w.add_int16("p.i16", -32000)
    w.add_uint32("p.u32", 4_000_000_000)
    w.add_int32("p.i32", -2_000_000_000)
    w.add_uint64("p.u64", 2**64 - 2)
    w.add_int64("p.i64", -(2**62))
    w.add_float32("p.f32", 1.1)
    w.add_float64("p.f64", 2.0 / 3.0)
    w.add_bool("p.bool", True)
    w.add_string("p.str", "héllo\tworld")
    w.add_array("p.arr_str", ["<s>", "</s>", "▁the"])
    w.add_array("p.arr_f32", [0.5, -1.25])
    w.add_array("p.arr_i32", [1, -2, 3])
    w.add_array("p.arr_nested", [[1, 2], [3]])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((3, 8)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 4)).astype(np.float16))
    w.add_tensor("i8", np.arange(5, dtype=np.int8))
    q8 = rng.integers(0, 256, size=(2, 34), dtype=np.uint8)  # 2 rows of one Q8_0 block
    w.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # byte shape (2, 34)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours, kvs = assert_same(path)
    by_name = {t["name"]: t for t in ours["tensors"]}
    assert by_name["token_embd.weight"]["dims"] == [8, 3]  # ne order: fastest first
    assert by_name["q8"]["type"] == int(gguf.GGMLQuantizationType.Q8_0)
    assert by_name["q8"]["dims"] == [32, 2]
    by_key = {kv["key"]: kv for kv in ours["metadata"]}
    assert by_key["general.architecture"]["value"] == "qwen2"
    assert by_key["p.u64"]["value"] == 2**64 - 2
    assert by_key["p.arr_nested"]["value"] == [[1, 2], [3]]


def test_split_model_reads_in_python_and_ours(tmp_path):
    prefix = tmp_path / "sp"
    run_fixture("write-split", prefix, 3)
    whole = tmp_path / "whole.gguf"
    run_fixture("write", whole)
    merged = dump(f"{prefix}-00002-of-00003.gguf")  # any part opens the whole model
    single = dump(whole)
    assert merged["n_files"] == 3
    assert [t["name"] for t in merged["tensors"]] == [t["name"] for t in single["tensors"]]
    assert [t["data_hex"] for t in merged["tensors"]] == [t["data_hex"] for t in single["tensors"]]
    total = 0
    for k in range(3):
        part = f"{prefix}-{k + 1:05d}-of-00003.gguf"
        _, kvs, tensors = python_view(part)
        assert kvs["split.no"][1] == k
        assert kvs["split.count"][1] == 3
        assert kvs["split.tensors.count"][1] == len(single["tensors"])
        total += len(tensors)
    assert total == len(single["tensors"])
