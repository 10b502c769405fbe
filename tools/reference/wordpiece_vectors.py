#!/usr/bin/env python3
"""WordPiece reference vectors: the Hugging Face `tokenizers` package on a BERT
tokenizer.json, over a few hundred varied strings.

For every string it records the ids `tokenizers.Tokenizer.from_file(...).encode(s).ids`
gives in three settings, and the decoded text:
  ids              add_special_tokens=True,  special-token text is plain text
  ids_no_special   add_special_tokens=False, special-token text is plain text
  ids_parse_special add_special_tokens=True, special-token text ("[SEP]") matched
  decoded          decode(ids_no_special, skip_special_tokens=True) with the WordPiece
                   decoder's clean-up off ("##" pieces join the previous word, others
                   get one space before them; nothing else changes)
  decoded_special  decode(ids, skip_special_tokens=False), same decoder: special tokens
                   are words like the others ("[CLS] hello [SEP]")
"Plain text" is `encode_special_tokens=True` (minfer's parse_special=false); the
matched form is tokenizers' default (minfer's parse_special=true). The file's own
truncation (128) and padding (to 128) are switched off: they are the sentence-embedding
pipeline's settings, not the tokenizer's.

The strings are the hand-written list below plus llama.cpp's tokenizer test strings
(tests/data/vocab/ggml-vocab-gpt-2.gguf.inp) and seeded random mixtures. Characters
assigned or recategorised after Unicode 9 are avoided: tokenizers classifies them
with Unicode 9 tables (unicode_categories), minfer with libutf8proc's (Unicode 15);
docs/ARCHITECTURE.md names the difference.

usage (from the repository root; needs `pip install tokenizers`):
  python3 tools/reference/wordpiece_vectors.py \
      --tokenizer tests/data/tokenizers/minilm/tokenizer.json \
      --out tests/data/tokenizers/minilm/vectors.json
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders

HAND = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    " \t \n \r\n ",
    "Hello world",
    " Hello world",
    "Hello World!",
    "HELLO, WORLD!!!",
    "hello\tworld\nagain",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter!",
    "They're we've you'll he'd I'm",
    "unaffable",
    "tokenization is fun",
    "Transformers are state-of-the-art.",
    "e-mail: someone@example.com",
    "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2?x=1&y=2#frag",
    "C:\\Temp\\name\\file.txt",
    "def foo(x): return x ** 2  # square",
    "int main() { printf(\"%d\\n\", a[i] + b->c); }",
    "if (a && b || !c) { x += 1; } else { y -= 2; }",
    "<html><body class=\"x\">text</body></html>",
    "SELECT * FROM users WHERE id = 42;",
    "3.14159 2,718 1e-10 -42 +7 1/2 50% $100 €20 £5 ¥1000",
    "12345678901234567890",
    "0x1F 0b1010 0o777",
    "...",
    "!!!???",
    "--- *** ___ ===",
    "((()))[[[]]]{{{}}}",
    "a.b,c;d:e!f?g",
    "«quoted» “curly” ‘single’ „low“",
    "em—dash en–dash ellipsis…",
    "café naïve résumé façade",
    "Crème brûlée à la française",
    "ÀÁÂÃÄÅ àáâãäå ÈÉÊË èéêë",
    "Ångström Øresund Æsir œuvre",
    "Straße groß Größe Äpfel Übung ÖL",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Les élèves étudient à l'école; où est-ce?",
    "¿Dónde está la biblioteca? ¡Olé!",
    "Ça va? Très bien, merci.",
    "São Paulo, Coração, não",
    "Łódź Kraków Gdańsk żółć",
    "İstanbul ılık şişe çiğ öğün",
    "Příliš žluťoučký kůň úpěl ďábelské ódy",
    "ﬁnance ﬂow ﬀ",
    "½ ¼ ¾ ² ³ ¹",
    "Ⅻ ⅳ ① ⑳",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "中文分词测试",
    "我爱北京天安门。",
    "今天天气很好，我们去公园吧！",
    "混合English和中文text",
    "日本語のテキストです。",
    "ひらがな カタカナ 漢字",
    "東京は日本の首都です",
    "한국어 텍스트입니다",
    "안녕하세요, 세계!",
    "Привет, мир!",
    "Съешь же ещё этих мягких французских булок.",
    "ЁЖИК ёжик Йогурт йогурт",
    "Ελληνικά: Γειά σου Κόσμε! άέήίόύώ",
    "مرحبا بالعالم",
    "السَّلَامُ عَلَيْكُمْ",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Tiếng Việt có dấu",
    "emoji 😀 😃 😄 😁",
    "🦙.cpp 🚀 rocket",
    "👨‍👩‍👧‍👦 family",
    "❤️ heart ✔ check ☺",
    "I ❤ NY",
    "smile:) sad:( wink;)",
    "ok👍great",
    "tab\tseparated\tvalues",
    "multiple     spaces     here",
    "trailing spaces   ",
    "   leading spaces",
    "line1\nline2\r\nline3\rline4",
    "vertical\x0btab and form\x0cfeed",
    "null\x00byte",
    "bell\x07 escape\x1b[0m",
    "del\x7fchar",
    "soft\u00adhyphen",
    "zero\u200bwidth\u200cjoiner\u200dhere",
    "bom\ufeffinside",
    "nbsp\u00a0here and\u2003em space\u3000ideographic",
    "line\u2028sep para\u2029sep",
    "rtl\u200fmark ltr\u200emark",
    "private \ue000 use",
    "replacement \ufffd char",
    "combining e\u0301 a\u0300 n\u0303 o\u0308",
    "stacked a\u0301\u0302\u0303",
    "Ǆ ǅ ǆ titlecase",
    "ΣΊΣΥΦΟΣ final sigma ς",
    "ǰ ẖ ẗ",
    "[CLS] [SEP] [MASK] [PAD] [UNK]",
    "hello [SEP] world",
    "[CLS]x[SEP]",
    "[cls] lowercase not special",
    "before[MASK]after",
    "[unused0] [unused1]",
    "##",
    "##ing",
    "# hash ## double ### triple",
    "a" * 100,
    "a" * 101,
    "b" * 150,
    "supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" * 99 + "é",
    "é" * 101,
    "Ä" * 100,
    "word" + "z" * 120 + " next",
    "qwxzjvk",
    "zzzzqqqq",
    "MiXeD CaSe WoRdS",
    "CamelCaseIdentifier snake_case_identifier kebab-case-identifier",
    "UPPERCASE lowercase Titlecase",
    "don't won't shouldn't",
    "U.S.A. e.g. i.e. etc.",
    "3:45pm 12/25/2024 2024-12-25T10:00:00Z",
    "+1 (555) 123-4567",
    "user@domain.org, admin@site.net",
    "path/to/some/file.py:123",
    "git commit -m \"fix: bug\"",
    "λx. x + 1",
    "∀x ∈ ℝ: x² ≥ 0",
    "∑ ∏ ∫ √ ∞ ≈ ≠ ≤",
    "→ ← ↑ ↓ ⇒",
    "© ® ™ § ¶ † ‡ •",
    "° ± × ÷ µ",
    "~`!@#$%^&*()_+-={}|[]\\:\";'<>?,./",
    "𝒜𝓁𝓅𝒽𝒶 math script",
    "𠀀𠀁 extension B",
    "豈 更 compatibility ideographs",
    "〇 々 〆",
    "Ｈｅｌｌｏ，ｗｏｒｌｄ！",
    "、。〃〈〉《》「」『』【】",
    "ｶﾀｶﾅ halfwidth",
    "one\ntwo\n\nthree\n\n\nfour",
    "  \n\t  mixed whitespace  \t\n  ",
    ".hidden ..parent .../dots",
    "'single' \"double\" `back`",
    "a-b_c.d/e\\f|g",
    "1,000,000.00",
    "v1.2.3-beta+build.5",
    "ID: ABC-123-xyz",
    "re-enter co-operate pre-emptive",
    "Hello" * 30,
]


def inputs_from_vocab_tests(path: Path) -> list[str]:
    """llama.cpp's .inp format: strings each followed by "\\n__ggml_vocab_test__\\n"."""
    text = path.read_text(encoding="utf-8")
    parts = text.split("\n__ggml_vocab_test__\n")
    return parts[:-1]


def random_mixtures(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pools = [
        ["the", "of", "and", "tokenizer", "embedding", "sentence", "model", "Paris",
         "München", "naïve", "coöperate", "北京", "東京", "서울", "Москва", "Αθήνα", "القاهرة"],
        [" ", "  ", "\t", "\n", " \n "],
        [".", ",", "!", "?", ";", ":", "-", "(", ")", "\"", "'", "…", "—", "¿", "«", "»"],
        ["1", "42", "3.14", "2024", "0x7f", "1e9"],
        ["😀", "🚀", "👍", "★", "♥", "☃"],
        ["É", "ñ", "ß", "Ø", "ç", "İ", "ı", "Ω", "ж", "ü", "é"],
    ]
    out = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 14)):
            pool = rng.choice(pools)
            pieces.append(rng.choice(pool))
        out.append("".join(pieces))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--vocab-inp", type=Path,
                    default=Path("tests/data/vocab/ggml-vocab-gpt-2.gguf.inp"))
    ap.add_argument("--n-random", type=int, default=120)
    ap.add_argument("--seed", type=int, default=20261203)
    args = ap.parse_args()

    tok = Tokenizer.from_file(str(args.tokenizer))
    tok.no_truncation()
    tok.no_padding()
    dec = Tokenizer.from_file(str(args.tokenizer))
    dec.decoder = decoders.WordPiece(prefix="##", cleanup=False)

    strings = list(HAND)
    strings += inputs_from_vocab_tests(args.vocab_inp)
    strings += random_mixtures(args.n_random, args.seed)
    seen = set()
    cases = []
    for s in strings:
        if s in seen:
            continue
        seen.add(s)
        tok.encode_special_tokens = True
        ids = tok.encode(s, add_special_tokens=True).ids
        ids_no_special = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        ids_parse_special = tok.encode(s, add_special_tokens=True).ids
        decoded = dec.decode(ids_no_special, skip_special_tokens=True)
        decoded_special = dec.decode(ids, skip_special_tokens=False)
        cases.append({"text": s, "ids": ids, "ids_no_special": ids_no_special,
                      "ids_parse_special": ids_parse_special, "decoded": decoded,
                      "decoded_special": decoded_special})

    import tokenizers
    doc = {
        "source": "tokenizers " + tokenizers.__version__ + " on " + args.tokenizer.name +
                  " (tools/reference/wordpiece_vectors.py)",
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases -> {args.out}")


if __name__ == "__main__":
    main()
