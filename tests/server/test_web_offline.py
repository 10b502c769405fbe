"""The web pages the server embeds (src/server/web/*.html) work with no network beyond
the server: no absolute URL, no protocol-relative URL, no src/href/url()/@import/
fetch/EventSource that points anywhere but the server itself."""
import re
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[2] / "src" / "server" / "web"
PAGES = sorted(WEB.glob("*.html"))

# Any of these in a page is a reference to another host.
EXTERNAL = [
    (re.compile(r"\b(?:https?|wss?|ftp):\\?/\\?/", re.I), "absolute URL"),
    (re.compile(r"""(?:["'(=\s])//[\w.-]+\.[a-z]{2,}""", re.I), "protocol-relative URL"),
    (re.compile(r"@import", re.I), "CSS @import"),
    (re.compile(r"""<[a-z][^>]*\s(?:src|href|action|poster|data)\s*=\s*["']?(?!["']?(?:data:,|#|[\w./?=&-]*["'\s>]))""", re.I),
     "src/href to a non-relative target"),
    (re.compile(r"""url\(\s*["']?(?!data:|#)[^)"']*:""", re.I), "CSS url() with a scheme"),
    (re.compile(r"""\b(?:fetch|EventSource|WebSocket|importScripts)\(\s*["'`][^"'`]*:""", re.I),
     "request to an absolute URL"),
    (re.compile(r"<script[^>]*\bsrc\b", re.I), "external script"),
    (re.compile(r"<link[^>]*rel=[\"']?stylesheet", re.I), "external stylesheet"),
]


def test_pages_exist():
    assert [p.name for p in PAGES] and "chat.html" in [p.name for p in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_has_no_external_url(page):
    text = page.read_text()
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for rx, what in EXTERNAL:
            m = rx.search(line)
            if m:
                found.append(f"{page.name}:{n}: {what}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_scanner_catches_external_references(tmp_path):
    """The scan fails on each kind of outside reference (so a pass means something)."""
    bad = ['<script src="https://cdn.example.com/x.js"></script>', "<img src=//cdn.example.org/a.png>",
           "<style>@import 'x.css';</style>", "background: url(http://x.org/a.png)",
           'fetch("https://api.example.com/v1")', '<a href="ftp://x.org/">', "<link rel=stylesheet href=a.css>",
           "<img src='javascript:alert(1)'>"]
    for line in bad:
        assert any(rx.search(line) for rx, _ in EXTERNAL), line
    ok = ['<a href="viz">', '<link rel="icon" href="data:,">', 'fetch("v1/chat/completions", {', "href=\"#top\"",
          'new EventSource("viz/events?x=1")']
    for line in ok:
        assert not any(rx.search(line) for rx, _ in EXTERNAL), line
