"""Records what llama.cpp's convert_hf_to_gguf.py writes for the tiny HF checkpoints of
tests/apps/hf_checkpoint.py (Llama, Qwen2, Qwen3, BERT) at each --outtype, as a digest
small enough to commit: every metadata key with its GGUF type and value (long arrays as
length + sha256 of their JSON), every tensor's name, type, shape and sha256 of its
bytes, in file order, plus the file's alignment and sha256. A `minfer convert` test
compares its output with tests/data/convert/<config>-<outtype>.json (CI has no torch).
With --minilm DIR it records the sentence-transformers all-MiniLM-L6-v2 folder DIR
(scripts/setup.sh unpacks it into the model cache) at f32 and f16 as minilm-<outtype>.json,
converted from a folder named all-MiniLM-L6-v2 (general.* comes from the name) holding
links to DIR's files but README.md: minfer convert does not read the model card.
  usage: python convert_reference.py CONVERTER_PY OUT_DIR [--minilm DIR] [CONFIG ...]
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
MINILM_OUTTYPES = ["f32", "f16"]


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


def record(converter, hf, ot, out_json, tmp):
    gg = Path(tmp) / f"{out_json.stem}.gguf"
    subprocess.run([sys.executable, str(converter), str(hf), "--outtype", ot,
                    "--outfile", str(gg)], check=True, capture_output=True)
    d = digest(str(gg))
    d["converter"] = "llama.cpp convert_hf_to_gguf.py of llama-cpp-python 0.3.36"
    out_json.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
    print(out_json.stem, d["file_sha256"], flush=True)


def minilm_folder(src, root):
    """`root`/all-MiniLM-L6-v2 with links to the files of `src` except README.md."""
    d = Path(root) / "all-MiniLM-L6-v2"
    d.mkdir(parents=True)
    for f in Path(src).iterdir():
        if f.name != "README.md":
            (d / f.name).symlink_to(f.resolve())
    return d


def main():
    args = sys.argv[1:]
    converter, out_dir = Path(args.pop(0)), Path(args.pop(0))
    minilm = None
    if args[:1] == ["--minilm"]:
        minilm = Path(args[1])
        args = args[2:]
    sys.path.insert(0, str(converter.parent / "gguf-py"))
    configs = args or list(hf_checkpoint.CONFIGS) + list(hf_checkpoint.BERT_CONFIGS)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in configs:
            hf = hf_checkpoint.write(name, Path(tmp) / name, ROOT / "tests" / "data" / "tokenizers")
            for ot in OUTTYPES:
                record(converter, hf, ot, out_dir / f"{name}-{ot}.json", tmp)
        if minilm:
            hf = minilm_folder(minilm, Path(tmp) / "minilm")
            for ot in MINILM_OUTTYPES:
                record(converter, hf, ot, out_dir / f"minilm-{ot}.json", tmp)


if __name__ == "__main__":
    main()
