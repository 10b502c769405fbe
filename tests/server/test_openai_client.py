"""Stage 17 tests: the official `openai` Python client, unmodified, against `minfer
serve` on loopback with SmolLM2 — chat and completions, streaming and not, usage and
finish_reason, plus /v1/models, /health, /tokenize, /detokenize and the request log."""
import subprocess
import time

import pytest

from conftest import BIN, MODEL, needs_model

openai = pytest.importorskip("openai")


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@needs_model
def test_chat_non_stream(server):
    c = client(server)
    r = c.chat.completions.create(model="smollm2", messages=[
        {"role": "user", "content": "What is the capital of France?"}],
        max_tokens=16, temperature=0, seed=1)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == "smollm2"
    ch = r.choices[0]
    assert ch.message.role == "assistant"
    assert ch.message.content
    assert ch.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10
    assert 0 < r.usage.completion_tokens <= 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@needs_model
def test_chat_equals_the_cli_render_and_greedy_run(server):
    # The CLI's greedy run on the same rendered chat prompt, with the same repeat
    # penalty given to both: the server must produce the same bytes.
    q = "What is the capital of France?"
    cli = subprocess.run([BIN, str(MODEL), q, "--greedy", "--repeat-penalty", "1.1", "-n", "16",
                          "-t", "2"],
                         capture_output=True, timeout=300)
    assert cli.returncode == 0, cli.stderr.decode()
    r = client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": q}], max_tokens=16, temperature=0,
        extra_body={"repeat_penalty": 1.1})
    assert r.choices[0].message.content.encode().rstrip(b"\n") == cli.stdout.rstrip(b"\n")


@needs_model
def test_chat_stream_equals_non_stream(server):
    c = client(server)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Name three colors."}]}]
    full = c.chat.completions.create(model="m", messages=msgs, max_tokens=24, seed=5,
                                     temperature=0.7)
    chunks = list(c.chat.completions.create(model="m", messages=msgs, max_tokens=24, seed=5,
                                            temperature=0.7, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


@needs_model
def test_completions_stream_and_not(server):
    c = client(server)
    r = c.completions.create(model="m", prompt="The capital of France is", max_tokens=8,
                             temperature=0)
    assert r.object == "text_completion"
    assert "Paris" in r.choices[0].text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    s = list(c.completions.create(model="m", prompt="The capital of France is", max_tokens=8,
                                  temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in s) == r.choices[0].text
    assert s[-1].choices[0].finish_reason == "length"


@needs_model
def test_stop_string_is_never_emitted(server):
    c = client(server)
    base = c.completions.create(model="m", prompt="1, 2, 3, 4,", max_tokens=12, temperature=0)
    text = base.choices[0].text
    assert " 6" in text, text
    for stream in (False, True):
        kw = dict(model="m", prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[" 6"])
        if stream:
            out = "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))
        else:
            r = c.completions.create(**kw)
            assert r.choices[0].finish_reason == "stop"
            out = r.choices[0].text
        assert out == text[:text.index(" 6")]


@needs_model
def test_logprobs(server):
    c = client(server)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for e in lp:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5)


@needs_model
def test_models_health_tokenize_detokenize(server):
    c = client(server)
    models = c.models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert server.healthy()
    st, tok = server.post("/tokenize", {"content": "Hello world"})
    assert st == 200 and len(tok["tokens"]) == 2
    st, detok = server.post("/detokenize", {"tokens": tok["tokens"]})
    assert st == 200 and detok["content"] == "Hello world"


@needs_model
def test_request_log_line_and_metrics(server):
    server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0})
    t0 = time.time()  # the log line is written once the response is out
    while "completion=3" not in server.stderr() and time.time() - t0 < 10:
        time.sleep(0.05)
    log = server.stderr()
    assert "[server] POST /v1/completions 200 prompt=" in log
    assert "completion=3" in log and " ms" in log
    m = server.metrics()
    for name in ("minfer_requests_total", "minfer_queue_depth", "minfer_requests_running",
                 "minfer_prompt_tokens_total", "minfer_completion_tokens_total",
                 "minfer_prefill_tokens_per_second", "minfer_decode_tokens_per_second",
                 "minfer_kv_cells_used", "minfer_kv_cells_free", "minfer_kv_cells_shared",
                 "minfer_prefix_reused_tokens_total"):
        assert name in m, name
    assert m["minfer_kv_cells_total"] == 4 * 1024


@needs_model
def test_cors_preflight(server):
    import urllib.request
    req = urllib.request.Request(server.url + "/v1/chat/completions", method="OPTIONS",
                                 headers={"Origin": "http://example.test",
                                          "Access-Control-Request-Method": "POST"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 204
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        assert "POST" in r.headers["Access-Control-Allow-Methods"]
