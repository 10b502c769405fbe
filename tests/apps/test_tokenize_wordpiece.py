"""`minfer tokenize` on llama.cpp's vocab-only GGUF of all-MiniLM-L6-v2 (WordPiece)
prints the ids Hugging Face tokenizers gives (tests/data/tokenizers/minilm/vectors.json):
[CLS] ... [SEP] by default, none with --no-special, "[SEP]" text as the token with
--parse-special; the per-token listing shows a word's first piece with a space before
it and a continuation piece bare. The text goes through --file, byte for byte."""
import json
import os
import subprocess
from pathlib import Path

import pytest

MINFER = os.environ.get("MINFER_BIN", "minfer")
TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", Path(__file__).resolve().parents[1] / "data"))
MINILM = TESTDATA / "tokenizers" / "minilm"
GGUF = MINILM / "ggml-vocab-minilm.gguf"

CASES = json.loads((MINILM / "vectors.json").read_text(encoding="utf-8"))["cases"]
# A spread of the recorded strings: accents, CJK, emoji, special-token text, long words.
PICKED = [c for c in CASES if c["text"] in (
    "Hello World!", "Straße groß Größe Äpfel Übung ÖL", "今天天气很好，我们去公园吧！",
    "emoji 😀 😃 😄 😁", "hello [SEP] world", "a" * 101, "unaffable", "")]


def tokenize(tmp_path, text, *flags):
    f = tmp_path / "in.txt"
    f.write_bytes(text.encode("utf-8"))
    res = subprocess.run([MINFER, "tokenize", str(GGUF), "--file", str(f), *flags],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode("utf-8")


def ids_of(out):
    return [int(x) for x in out.split()]


def test_picked_cases_present():
    assert len(PICKED) == 8


@pytest.mark.parametrize("case", PICKED, ids=lambda c: repr(c["text"][:20]))
def test_ids_equal_hf_tokenizers(tmp_path, case):
    assert ids_of(tokenize(tmp_path, case["text"], "--ids")) == case["ids"]
    assert ids_of(tokenize(tmp_path, case["text"], "--ids", "--no-special")) == \
        case["ids_no_special"]
    assert ids_of(tokenize(tmp_path, case["text"], "--ids", "--parse-special")) == \
        case["ids_parse_special"]


def test_listing_shows_word_starts_and_continuations(tmp_path):
    out = tokenize(tmp_path, "unaffable")
    assert out == ("    101 -> ' [CLS]'\n  14477 -> ' una'\n  20961 -> 'ffa'\n"
                   "   3468 -> 'ble'\n    102 -> ' [SEP]'\n")
