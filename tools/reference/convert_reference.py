"""Records what llama.cpp's convert_hf_to_gguf.py writes for the tiny HF checkpoints of
tests/apps/hf_checkpoint.py (Llama, Qwen2, Qwen3) at each --outtype, as a digest small
enough to commit: every metadata key with its GGUF type and value (long arrays as
length + sha256 of their JSON), every tensor's name, type, shape and sha256 of its
bytes, in file order, plus the file's alignment and sha256. A `minfer convert` test
compares its output with tests/data/convert/<config>-<outtype>.json (CI has no torch).
  usage: python convert_reference.py CONVERTER_PY OUT_DIR [CONFIG ...]
  needs: torch, transformers, numpy, safetensors, the converter's gguf-py on sys.path"""
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "apps"))
import hf_checkpoint  # noqa: E402

OUTTYPES = ["f32", "f16", "bf16", "q8_0"]


def value_digest(field):
    import gguf
    types = [gguf.GGUFValueType(t).name for t in field.types]
    v = field.contents()
    if isinstance(v, list) and len(v) > 16:
        blob = json.dumps(v, ensure_ascii=False).encode()
        return {"type": types, "len": len(v), "sha256": hashlib.sha256(blob).hexdigest()}
    return {"type": types, "value": v}


def digest(path):
    import gguf
    r = gguf.GGUFReader(path)
    kv = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        kv[name] = value_digest(field)
    tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
                "sha256": hashlib.sha256(bytes(t.data.tobytes())).hexdigest()}
               for t in r.tensors]
    return {"alignment": r.alignment, "file_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
            "metadata_order": list(kv), "metadata": kv, "tensors": tensors}


def main():
    converter, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(converter.parent / "gguf-py"))
    configs = sys.argv[3:] or list(hf_checkpoint.CONFIGS)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in configs:
            hf = hf_checkpoint.write(name, Path(tmp) / name, ROOT / "tests" / "data" / "tokenizers")
            for ot in OUTTYPES:
                gg = Path(tmp) / f"{name}-{ot}.gguf"
                subprocess.run([sys.executable, str(converter), str(hf), "--outtype", ot,
                                "--outfile", str(gg)], check=True, capture_output=True)
                d = digest(str(gg))
                d["converter"] = "llama.cpp convert_hf_to_gguf.py of llama-cpp-python 0.3.36"
                (out_dir / f"{name}-{ot}.json").write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
                print(name, ot, d["file_sha256"], flush=True)


if __name__ == "__main__":
    main()
