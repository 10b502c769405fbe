"""Records what llama.cpp's llama-embedding prints for all-MiniLM-L6-v2 (the GGUF that
`minfer convert` makes, byte-identical to convert_hf_to_gguf.py's) on the inputs of
tests/data/embed/minilm-reference.json, one run per input at llama-embedding's defaults
(mean pooling from the GGUF, --embd-normalize 2, flash attention auto) with 2 threads,
for tests/engine/embed_test.cpp's llama.cpp comparison. The vectors are what it prints
(--embd-output-format array: 7 decimals) and the token ids it ran (--verbose-prompt).
  usage: python embed_llamacpp.py LLAMA_EMBEDDING_BIN MODEL.gguf OUT_JSON
Recorded with llama-embedding built from the llama.cpp vendored in llama-cpp-python 0.3.36
(GGML_NATIVE=OFF with AVX, AVX2, FMA, F16C, AVX512 F/BW/VBMI/VNNI/BF16 on), on an AMD EPYC."""
import json
import re
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
                                  "--embd-separator", "\x1f", "--embd-output-format", "array",
                                  "--verbose-prompt"],
                                 capture_output=True, text=True, check=True)
            try:
                at = out.stdout.index("[[")
                vec = json.JSONDecoder().raw_decode(out.stdout[at:])[0][0]
                # --verbose-prompt: "   101 -> '[CLS]'" per token, before the vectors.
                ids = [int(m.group(1)) for m in
                       re.finditer(r"^\s*(\d+) -> '", out.stdout[:at], flags=re.M)]
                break
            except (ValueError, json.JSONDecodeError):
                print(f"input {i}: unparsable output, again", file=sys.stderr)
        if vec is None or len(vec) != 384:
            sys.exit(f"input {i}: no vector from llama-embedding")
        # The ids llama.cpp's tokenizer gave (its WordPiece differs from Hugging Face's on a
        # few inputs: no 100-character word limit, Hangul not decomposed): the test feeds
        # these, so the comparison is of the forward alone.
        cases.append({"index": i, "ids": ids, "embedding": vec})
    Path(out_path).write_text(json.dumps({"tool": "llama-embedding (llama.cpp of llama-cpp-python "
                                          "0.3.36)", "cases": cases}), encoding="utf-8")


if __name__ == "__main__":
    main()
