"""Test strings for the tokenizer differential test (tests/tokenizer_diff).

Deterministic for a given seed: the same list every run, on every machine (only
`random.Random(seed)` and `unicodedata` of the running Python are used; the Unicode
block table below is fixed, and characters are filtered by category so that a newer
Unicode database can only add characters to the pool, never reorder the draw of
strings from the fixed parts).

Classes follow llama.cpp's tests/test-tokenizer-random.py (custom texts, its edge
cases, ASCII left/right-strip pairs, apostrophes, random Unicode words, added tokens
with surrounding whitespace) plus: whitespace runs with unusual spaces, digit runs in
several scripts, code, emoji (ZWJ sequences, skin tones, flags, keycaps), CJK and
mixed scripts, contractions in mixed case.

Run as a script to print the strings as JSON lines: `python3 gen_strings.py [N] [SEED]`.
"""

from __future__ import annotations

import json
import random
import sys
import unicodedata
from typing import Iterable, Iterator

CUSTOM = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n",
    "Hello world", " Hello world", "Hello World", " Hello World", " Hello World!",
    "Hello, world!", " Hello, world!", " this is 🦙.cpp", "w048 7tuijk dsdfhu",
    "нещо на Български", "កាន់តែពិសេសអាចខលចេញ",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "Hello", " Hello", "  Hello", "   Hello", "    Hello", "    Hello\n    Hello",
    " (", "\n =", "' era", "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "3", "33", "333", "3333", "33333", "333333", "3333333", "33333333", "333333333",
]

# The edge cases llama.cpp's random tokenizer test collected while debugging.
EDGE_CASES = [
    "\x1f-a", "¼-a", "½-a", "¾-a", "a 〇b", "Ⅵ-a", "\ufeff//", "Cửa Việt", "<s>a",
    "<unk><|endoftext|><s>", "a\na", '"`', " \u2e4e", "\n\x0b  ", "a\xa0\xa0\x00b",
    "one <mask>", "a </s> b", "a <mask> b", "\xa0aC", "\u2029 \ua3e4", "a ?", "å",
    "\U000ac517", "\U000522f4", "<s><s><unk><s>a<s>b<s>c<unk>d<unk></s>",
    "<s> <s> <unk><s>a<s>b<s>c<unk>d<unk></s>",
]

SPACES = [
    " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680",
    "\u2000", "\u2002", "\u2003", "\u2007", "\u2009", "\u200a", "\u200b", "\u2028", "\u2029",
    "\u202f", "\u205f", "\u3000", "\ufeff", "\u180e",
]

WORDS = [
    "the", "The", "THE", "hello", "World", "naïve", "café", "straße", "İstanbul", "ǅemal",
    "déjà", "vu", "über", "a", "I", "x", "ok", "llama", "Qwen", "token", "GGUF", "cpp",
    "don", "isn", "we", "they", "you", "it", "he", "she", "OpenAI", "e.g.", "i.e.",
]

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re",
                "'rE", "'VE", "'vE", "'M", "'LL", "'Ll", "'D", "’s", "’ll", "'", "''", "'x"]

DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９",
          "①②③④⑤", "ⅠⅡⅢⅣⅤⅥ", "¹²³", "½¼¾", "〇一二三"]

CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    '{"key": "value", "n": [1, 2, 3.5e-7], "ok": true, "none": null}',
    "<div class=\"x\">\n  <a href='https://example.com/?q=1&r=2'>link</a>\n</div>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "#!/bin/sh\nset -eu\nfor f in *.txt; do echo \"$f\"; done\n",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", v); Ok(()) }",
    "x = [i for i in range(10) if i % 2 == 0]\r\nprint(x)\r\n",
    "    if (a && b || !c) { return -1; }  // TODO: handle\n",
    "const f = async (a, b) => { await g(a?.b ?? 0); };",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "a  +=  1;;\t\t// spaces  and\ttabs\n\n\n",
    "std::vector<std::pair<int, float>> v{{1, 2.0f}};",
    "@decorator\nclass A(B, metaclass=M):\n    __slots__ = ('x',)\n",
]

EMOJI = [
    "😀", "😁", "🦙", "🚀", "✅", "❤️", "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿",
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑‍🤝‍🧑", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️", "🇺🇸", "🇯🇵", "🇩🇪",
    "1️⃣", "#️⃣", "*️⃣", "☺", "☺️", "🫠", "🫶🏾", "😶‍🌫️", "❤️‍🔥", "🐕‍🦺", "🤷‍♀️", "🙋🏻‍♂️",
]

SCRIPTS = [
    "我想在apple工作", "日本語のテキストです。カタカナとひらがな", "한국어 텍스트입니다",
    "Привет, мир! Как дела?", "Γειά σου κόσμε", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "ជំរាបសួរ", "Xin chào thế giới", "Tiếng Việt có dấu",
    "ᐊᐃᐅᐸ", "ሰላም ልዑል", "Здраво свете", "ქართული", "Հայերեն", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙",
    "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ", "e\u0301 a\u0300 n\u0303 (combining)", "ﬁ ﬂ ﬀ ligatures",
]

# Unicode blocks to draw random characters from (start, end inclusive).
BLOCKS = [
    (0x0020, 0x007E), (0x00A0, 0x00FF), (0x0100, 0x024F), (0x0250, 0x02AF), (0x0300, 0x036F),
    (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0530, 0x058F), (0x0590, 0x05FF), (0x0600, 0x06FF),
    (0x0900, 0x097F), (0x0980, 0x09FF), (0x0E00, 0x0E7F), (0x10A0, 0x10FF), (0x1100, 0x11FF),
    (0x1780, 0x17FF), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F),
    (0x2150, 0x218F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2500, 0x257F), (0x2600, 0x26FF),
    (0x2700, 0x27BF), (0x2E00, 0x2E7F), (0x3000, 0x303F), (0x3040, 0x309F), (0x30A0, 0x30FF),
    (0x4E00, 0x9FFF), (0xA000, 0xA48F), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFB00, 0xFB4F),
    (0xFE30, 0xFE4F), (0xFF00, 0xFFEF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF),
    (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF), (0x20000, 0x2A6DF),
    (0x0000, 0x001F), (0xE0000, 0xE007F), (0xA0000, 0xAFFFF),
]


def _pools(blocks: Iterable[tuple[int, int]]) -> list[list[str]]:
    """One pool per block, so small blocks are drawn as often as the big CJK ones."""
    out = []
    for lo, hi in blocks:
        # No surrogates / private use; unassigned code points are allowed (llama.cpp's
        # edge cases include some) but only from the blocks listed.
        out.append([chr(cp) for cp in range(lo, hi + 1)
                    if unicodedata.category(chr(cp)) not in ("Cs", "Co")])
    return out


def _random_unicode_words(rng: random.Random, pools: list[list[str]], n_words: int) -> str:
    ws = list(" " * 20 + "\n" * 5 + "\r\n" * 5 + "\t" * 5)
    parts = []
    for _ in range(n_words):
        # A word mostly from one block, sometimes mixed.
        home = rng.choice(pools)
        word = [rng.choice(home if rng.random() < 0.8 else rng.choice(pools))
                for _ in range(rng.randint(1, 7))]
        parts.append("".join(word) + rng.choice(ws))
    return "".join(parts)


def _mixed(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.randrange(8)
        if kind == 0:
            parts.append(rng.choice(WORDS) + rng.choice(CONTRACTIONS))
        elif kind == 1:
            parts.append(rng.choice(SPACES) * rng.randint(1, 4))
        elif kind == 2:
            d = rng.choice(DIGITS)
            parts.append("".join(rng.choices(d, k=rng.randint(1, 12))))
        elif kind == 3:
            parts.append(rng.choice(EMOJI) * rng.randint(1, 3))
        elif kind == 4:
            parts.append(rng.choice(SCRIPTS))
        elif kind == 5:
            parts.append(rng.choice(CODE))
        elif kind == 6:
            w = rng.choice(WORDS)
            parts.append("".join(c.upper() if rng.random() < 0.5 else c for c in w))
        else:
            parts.append(rng.choice(string_punct))
    return "".join(parts)


string_punct = [".", ",", "!", "?", "...", "--", "—", "–", "(", ")", "[", "]", "{", "}", "\"",
                "«", "»", "“", "”", "‘", "’", "¿", "¡", "@", "#", "$", "%", "^", "&", "*", "~",
                "`", "|", "\\", "/", ":", ";", "<", ">", "=", "+", "-", "_"]


def generate(n: int = 3000, seed: int = 1234, added_tokens: list[str] | None = None) -> list[str]:
    """About `n` strings (at least the fixed lists), the same for the same arguments.

    `added_tokens`: texts of added tokens to wrap in whitespace (generator_added_lr_strip).
    """
    rng = random.Random(seed)
    out: list[str] = []
    out += CUSTOM
    out += EDGE_CASES
    out += SPACES
    out += [w + c for w in ["it", "IT", "he", "We", "they", "x", "'"] for c in CONTRACTIONS]
    out += EMOJI
    out += SCRIPTS
    out += CODE
    out += DIGITS

    # ASCII left/right strip (a sample of llama.cpp's full product).
    chars = [chr(i) for i in range(1, 0x80)] + [""]
    strips = ["", " ", "  "]
    for _ in range(n // 6):
        c1, c2 = rng.choice(chars), rng.choice(chars)
        l, r = rng.choice(strips), rng.choice(strips)
        out.append(rng.choice([l + c1 + c2 + r, l + c1 + r + c2, c1 + l + c2 + r]))
    # Apostrophes.
    for _ in range(n // 10):
        c1, c2 = rng.choice(chars), rng.choice(chars)
        l, r = rng.choice(strips), rng.choice(strips)
        out.append(rng.choice([c1 + l + "'" + r + c2, c1 + c2 + l + "'" + r + "z",
                               "a" + l + "'" + r + c1 + c2]))
    # Whitespace runs.
    for _ in range(n // 10):
        out.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 8))) +
                   rng.choice(["", "a", "Hello", "1", "🦙", "中"]) +
                   "".join(rng.choice(SPACES) for _ in range(rng.randint(0, 5))))
    # Digit runs, alone and inside words.
    for _ in range(n // 15):
        d = rng.choice(DIGITS)
        run = "".join(rng.choices(d, k=rng.randint(1, 20)))
        out.append(rng.choice([run, "x" + run + "y", " " + run, run + ".5", "v" + run + "-rc1"]))
    # Mixed snippets.
    for _ in range(n // 4):
        out.append(_mixed(rng))
    # Random Unicode words from many blocks.
    pools = _pools(BLOCKS)
    for _ in range(n // 6):
        out.append(_random_unicode_words(rng, pools, rng.randint(1, 30)))
    # Added tokens with whitespace around them.
    if added_tokens:
        ws = ["", " ", "  ", "\n", "\r\n", "\n\n", "\t", "\t\t"]
        for _ in range(n // 20):
            t = rng.choice(added_tokens)
            l, r = rng.choice(ws), rng.choice(ws)
            out.append(rng.choice([l + t + r, "a" + l + t + r, l + t + r + "z",
                                   "a" + l + t + r + "z"]))
    return out


def _main(argv: list[str]) -> None:
    n = int(argv[1]) if len(argv) > 1 else 3000
    seed = int(argv[2]) if len(argv) > 2 else 1234
    for s in generate(n, seed):
        print(json.dumps(s, ensure_ascii=False))


if __name__ == "__main__":
    _main(sys.argv)


def iter_lines(strings: Iterable[str]) -> Iterator[str]:
    for s in strings:
        yield json.dumps(s, ensure_ascii=False)
