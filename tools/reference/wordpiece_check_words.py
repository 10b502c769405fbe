"""Writes src/convert/wordpiece_check_words.inc: the check text of llama.cpp's
convert_hf_to_gguf.py (get_vocab_base_pre's chktxt, read from the converter's source)
after the uncased BERT normalizer and BertPreTokenizer of TOKENIZER_JSON, one C string
per word. minfer convert runs its own WordPiece step over these words to reproduce the
converter's vocabulary fingerprint; the words depend on the normalizer, not the
vocabulary.
  usage: python wordpiece_check_words.py CONVERTER_BASE_PY TOKENIZER_JSON OUT_INC
  (CONVERTER_BASE_PY: the converter's conversion/base.py, or convert_hf_to_gguf.py in
  versions that keep get_vocab_base_pre there)
  needs: tokenizers"""
import ast
import json
import re
import sys

from tokenizers import Tokenizer


def main():
    src = open(sys.argv[1], encoding="utf-8").read()
    chktxt = ast.literal_eval(re.search(r"^\s*chktxt = ('.*')$", src, re.M).group(1))
    tok = Tokenizer.from_file(sys.argv[2])
    words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(chktxt))]
    lines, cur = [], ""
    for w in words:
        piece = json.dumps(w, ensure_ascii=False) + ", "
        if len(cur) + len(piece) > 90:
            lines.append(cur.rstrip())
            cur = ""
        cur += piece
    lines.append(cur.rstrip())
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        f.write("".join(f"    {line}\n" for line in lines))


if __name__ == "__main__":
    main()
