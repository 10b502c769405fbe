"""The chat page at GET / in a real browser (headless Debian chromium via Selenium)
against a real `minfer serve` on loopback with SmolLM2: a streamed reply grows in
steps, stop cancels the request on the server (its /metrics count it), regenerate and
edit-and-resend work, conversations survive a reload, model and user text with
markup renders as text (no script runs), the API key dialog, a phone-width layout.
Screenshots go to <build>/artifacts/web/."""
import time
from pathlib import Path

import pytest
from browser import make_driver, missing_reason, screenshot, wait_until
from conftest import MODEL, Server

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "src" / "server" / "web" / "chat.html"

pytestmark = [
    pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)"),
    pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason())),
]

# Records every length the last reply's text takes (a MutationObserver sees each DOM
# update, however short-lived), so the test sees the streaming, not just its end.
OBSERVE = """
window.__lens = [];
const box = document.getElementById('messages');
new MutationObserver(() => {
  const b = box.querySelectorAll('.msg.assistant .body');
  if (b.length) window.__lens.push(b[b.length - 1].textContent.length);
}).observe(box, {childList: true, subtree: true, characterData: true});
"""
LAST_REPLY = ("(() => { const b = document.querySelectorAll('.msg.assistant .body');"
              " return b.length ? b[b.length - 1].textContent : null; })()")
LAST_FOOTER = ("(() => { const b = document.querySelectorAll('.msg.assistant .footer .stats');"
               " return b.length ? b[b.length - 1].textContent : null; })()")
IDLE = "document.body.dataset.busy === ''"


@pytest.fixture(scope="module")
def server():
    s = Server("--slots", 2, "--n-ctx", 1024, "-t", 2)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def driver():
    d = make_driver()
    yield d
    d.quit()


def set_field(d, field, value):
    d.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        " e.dispatchEvent(new Event('change'));", "set-" + field, str(value))


def send(d, text):
    from selenium.webdriver.common.by import By

    box = d.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    d.find_element(By.ID, "send").click()


def fresh_page(d, url):
    d.get(url + "/")
    d.execute_script("localStorage.clear()")
    d.get(url + "/")
    d.execute_script(OBSERVE)


def test_the_page_served_is_the_embedded_file(server):
    status, body = server.request("GET", "/")
    assert status == 200
    assert body == PAGE.read_bytes()
    import urllib.request
    with urllib.request.urlopen(server.url + "/") as r:
        assert r.headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]


def test_stream_stop_regenerate_edit_reload(server, driver):
    from selenium.webdriver.common.by import By

    d = driver
    fresh_page(d, server.url)
    set_field(d, "temperature", 0)
    set_field(d, "max_tokens", 48)
    done0 = server.metrics()["minfer_requests_completed_total"]

    # 1. A streamed reply: the text takes several lengths before its last one.
    send(d, "Write a haiku about the sea.")
    wait_until(d, "document.body.dataset.busy === '1'", 10, what="the request to start")
    wait_until(d, IDLE, 60, what="the reply to finish")
    reply = d.execute_script("return " + LAST_REPLY)
    lens = d.execute_script("return window.__lens")
    distinct = sorted(set(n for n in lens if 0 < n < len(reply)))
    assert len(reply) > 10, reply
    assert len(distinct) >= 3, f"the reply did not grow incrementally: lengths {sorted(set(lens))}"
    stats = d.execute_script("return " + LAST_FOOTER)
    assert " prompt" in stats and " tokens" in stats and "tok/s" in stats, stats
    n_tokens = int(stats.split(" tokens")[0].split("·")[-1].strip())
    m = server.wait_metric("minfer_requests_completed_total", lambda v: v >= done0 + 1)
    assert 1 <= n_tokens <= 48
    screenshot(d, "chat.png")

    # 2. Stop mid-reply: the server sees the disconnect and counts a cancelled request.
    cancelled0 = m["minfer_requests_cancelled_total"]
    set_field(d, "max_tokens", 600)
    send(d, "Write a very long story about a dragon who learns to cook, in ten chapters.")
    wait_until(d, f"(({LAST_REPLY}) || '').length > 30", 60, poll_s=0.01, what="30 characters of reply")
    d.find_element(By.ID, "stop").click()
    wait_until(d, IDLE, 10, what="the page to leave the busy state after stop")
    server.wait_metric("minfer_requests_cancelled_total", lambda v: v >= cancelled0 + 1, 10)
    assert "stopped" in d.execute_script("return " + LAST_FOOTER)
    stopped_text = d.execute_script("return " + LAST_REPLY)
    assert len(stopped_text) > 30

    # 3. Regenerate replaces the last reply with a new one.
    set_field(d, "max_tokens", 24)
    n_msgs = len(d.find_elements(By.CSS_SELECTOR, "#messages .msg"))
    done1 = server.metrics()["minfer_requests_completed_total"]
    d.find_element(By.CSS_SELECTOR, ".msg.assistant:last-child .regen").click()
    wait_until(d, "document.body.dataset.busy === '1'", 10)
    wait_until(d, IDLE, 60, what="the regenerated reply")
    server.wait_metric("minfer_requests_completed_total", lambda v: v >= done1 + 1)
    assert len(d.find_elements(By.CSS_SELECTOR, "#messages .msg")) == n_msgs
    regenerated = d.execute_script("return " + LAST_REPLY)
    assert regenerated and "stopped" not in d.execute_script("return " + LAST_FOOTER)

    # 4. Edit-and-resend the last user message: the exchange after it is replaced.
    d.find_element(By.CSS_SELECTOR, ".msg.user .edit").click()
    ta = d.find_element(By.CSS_SELECTOR, ".edit-box textarea")
    ta.clear()
    ta.send_keys("Name three colours.")
    d.find_element(By.CSS_SELECTOR, ".edit-box .save-edit").click()
    wait_until(d, IDLE + " && document.querySelectorAll('.msg.assistant .body.cursor').length === 0", 60)
    users = [e.text for e in d.find_elements(By.CSS_SELECTOR, ".msg.user .bubble")]
    assert users == ["Write a haiku about the sea.", "Name three colours."]
    assert len(d.find_elements(By.CSS_SELECTOR, "#messages .msg")) == n_msgs

    # 5. Reload: the conversation comes back from localStorage.
    before = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#messages .msg .bubble")]
    d.refresh()
    titles = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#conv-list .conv")]
    assert titles == ["Write a haiku about the sea."]
    after = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#messages .msg .bubble")]
    assert after == before and len(after) == 4
    saved = d.execute_script("return window.minferChat.conversations()")
    assert saved[0]["messages"][0] == {"role": "user", "content": "Write a haiku about the sea."}


PAYLOAD_REPLY = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
PAYLOAD_USER = '<img src=x onerror="window.__xss=3"> and <script>window.__xss=4</script> **bold**'


def test_markup_in_replies_and_messages_renders_as_text(server, driver):
    from selenium.webdriver.common.by import By

    d = driver
    fresh_page(d, server.url)
    # The grammar forces the model's reply to be exactly the payload.
    gbnf = 'root ::= "' + PAYLOAD_REPLY.replace("\\", "\\\\").replace('"', '\\"') + '"'
    set_field(d, "grammar", gbnf)
    set_field(d, "max_tokens", 80)
    send(d, PAYLOAD_USER)
    wait_until(d, IDLE, 60, what="the forced reply")
    time.sleep(0.3)  # an injected <img onerror> would have fired by now
    assert d.execute_script("return typeof window.__xss") == "undefined"
    assert d.execute_script("return " + LAST_REPLY) == PAYLOAD_REPLY
    assert d.find_element(By.CSS_SELECTOR, ".msg.user .bubble").text == PAYLOAD_USER
    assert d.find_elements(By.CSS_SELECTOR, "#messages img, #messages script") == []
    # After a reload (rendered from localStorage) still nothing runs.
    d.refresh()
    time.sleep(0.3)
    assert d.execute_script("return typeof window.__xss") == "undefined"
    assert d.execute_script("return " + LAST_REPLY) == PAYLOAD_REPLY
    screenshot(d, "chat-markup-as-text.png")


def test_markdown_renderer(server, driver):
    d = driver
    fresh_page(d, server.url)
    md = lambda s: d.execute_script("return window.minferChat.markdown(arguments[0])", s)  # noqa: E731
    html = md("```python\nprint('<b>')\n```")
    assert '<span class="lang">python</span>' in html
    assert "<pre><code>print(&#39;&lt;b&gt;&#39;)</code></pre>" in html
    assert 'class="copy"' in html
    assert md("`<i>x</i>` and **b** and *i*") == \
        "<p><code>&lt;i&gt;x&lt;/i&gt;</code> and <strong>b</strong> and <em>i</em></p>"
    assert md("- one\n- two\n\n1. first") == "<ul><li>one</li><li>two</li></ul><ol><li>first</li></ol>"
    assert md("[site](https://example.org/a_b_c)") == \
        '<p><a href="https://example.org/a_b_c" target="_blank" rel="noopener noreferrer">site</a></p>'
    assert "<a " not in md("[x](javascript:alert(1))") and "<a " not in md("[x](data:text/html,hi)")
    assert md('[x](https://a" onmouseover="b)') == "<p>[x](https://a&quot; onmouseover=&quot;b)</p>"
    # A quote inside the URL stays escaped: it cannot close the attribute.
    assert md('[x](https://a"onmouseover="b)') == \
        '<p><a href="https://a&quot;onmouseover=&quot;b" target="_blank" rel="noopener noreferrer">x</a></p>'
    assert md("window.__x=1 and __bold__") == "<p>window.__x=1 and <strong>bold</strong></p>"
    think = d.execute_script("return window.minferChat.renderReply(arguments[0])", "<think>plan <b></think>Answer")
    assert think.startswith('<details class="think"><summary>Thoughts</summary>')
    assert "plan &lt;b&gt;" in think and think.endswith("<p>Answer</p>") and " open" not in think
    # A think span still streaming (no closing tag yet) is collapsed too.
    assert "Thinking" in d.execute_script("return window.minferChat.renderReply('<think>abc')")


def test_api_key_dialog(driver):
    from selenium.webdriver.common.by import By

    s = Server("--slots", 1, "--n-ctx", 512, "-t", 2, "--api-key", "s3cret")
    try:
        d = driver
        fresh_page(d, s.url)  # the page itself needs no key
        set_field(d, "max_tokens", 8)
        send(d, "Hi")
        wait_until(d, "document.getElementById('keydlg').classList.contains('open')", 20,
                   what="the API key dialog")
        d.find_element(By.ID, "api-key-input").send_keys("wrong")
        d.find_element(By.ID, "api-key-save").click()
        # Refused again: the dialog asks once more.
        wait_until(d, "document.getElementById('keydlg-msg').textContent.includes('refused')", 20)
        d.find_element(By.ID, "api-key-input").send_keys("s3cret")
        d.find_element(By.ID, "api-key-save").click()
        wait_until(d, IDLE, 60, what="the reply with the key")
        assert d.execute_script("return " + LAST_REPLY)
        assert d.execute_script("return localStorage.getItem('minfer.chat.apiKey')") == "s3cret"
        status, _ = s.request("GET", "/metrics")
        assert status == 401  # the rest of the server still needs the key
        log = s.stderr()
        assert log.count("POST /v1/chat/completions 401") == 2 and "POST /v1/chat/completions 200" in log
    finally:
        s.kill()


def test_phone_width_layout(server):
    d = make_driver(390, 844)
    try:
        # A phone's viewport (headless windows have a minimum width; the emulation has none).
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                          {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
        fresh_page(d, server.url)
        set_field(d, "max_tokens", 16)
        send(d, "Hello!")
        wait_until(d, IDLE, 60)
        vw = d.execute_script("return document.documentElement.clientWidth")
        assert vw == 390
        assert d.execute_script("return document.documentElement.scrollWidth") <= vw
        side = d.execute_script("return document.getElementById('sidebar').getBoundingClientRect().right")
        assert side <= 1, "the sidebar should be a drawer off screen at phone width"
        assert d.execute_script("return getComputedStyle(document.getElementById('topbar')).display") == "flex"
        bubble = d.execute_script("return document.querySelector('.msg.assistant .bubble').getBoundingClientRect().width")
        assert vw * 0.8 <= bubble <= vw
        screenshot(d, "chat-phone.png")
        d.execute_script("document.getElementById('drawer-btn').click()")
        wait_until(d, "document.getElementById('sidebar').getBoundingClientRect().left >= 0", 5)
    finally:
        d.quit()
