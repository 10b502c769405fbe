"""Records what llama.cpp's llama-embedding prints for all-MiniLM-L6-v2 (the GGUF that
`minfer convert` makes, byte-identical to convert_hf_to_gguf.py's) on the inputs of
tests/data/embed/minilm-reference.json, one run per input at llama-embedding's defaults
(mean pooling from the GGUF, --embd-normalize 2, flash attention auto) with 2 threads,
for tests/engine/embed_test.cpp's llama.cpp comparison. The vectors are what it prints
(--embd-output-format array: 7 decimals).
  usage: python embed_llamacpp.py LLAMA_EMBEDDING_BIN MODEL.gguf OUT_JSON
Recorded with llama-embedding built from the llama.cpp vendored in llama-cpp-python 0.3.36
(GGML_NATIVE=OFF with AVX, AVX2, FMA, F16C, AVX512 F/BW/VBMI/VNNI/BF16 on), on an AMD EPYC."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    binary, model, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    ref = json.loads((ROOT / "tests/data/embed/minilm-reference.json").read_text(encoding="utf-8"))
    cases = []
    for i, c in enumerate(ref["cases"]):
        if len(c["ids"]) >= 512 or "\n" in c["text"] or c["text"].strip() == "":
            continue  # llama-embedding aborts past its context, splits lines, skips empty prompts
        vec = None
        for _ in range(3):  # its log thread can interleave a line into the array: run again
            out = subprocess.run([binary, "-m", model, "-p", c["text"], "-t", "2",
                                  "--embd-separator", "\x1f", "--embd-output-format", "array"],
                                 capture_output=True, text=True, check=True)
            try:
                vec = json.JSONDecoder().raw_decode(out.stdout[out.stdout.index("[["):])[0][0]
                break
            except (ValueError, json.JSONDecodeError):
                print(f"input {i}: unparsable output, again", file=sys.stderr)
        if vec is None or len(vec) != 384:
            sys.exit(f"input {i}: no vector from llama-embedding")
        cases.append({"index": i, "embedding": vec})
    Path(out_path).write_text(json.dumps({"tool": "llama-embedding (llama.cpp of llama-cpp-python "
                                          "0.3.36)", "cases": cases}), encoding="utf-8")


if __name__ == "__main__":
    main()
