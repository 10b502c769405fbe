"""Stage 17 tests: reasoning models' thinking blocks on the OpenAI chat route — the block
split into reasoning_content (whole and streamed, before the content), left in the content
with reasoning_format none, bounded by a budget the server closes itself, and a response
format enforced only after the block. The model is a random-weight Qwen3-shaped fixture:
its thinking never closes by itself, so every answer here exists only because the budget
closed the block. Templates: DeepSeek-R1-Distill-Llama's (the prompt ends inside an open
block) and Qwen3's (the model opens the block), from tests/data/templates."""
import json
import os
from pathlib import Path

import pytest

from conftest import CACHE, Server

MODEL = CACHE / "models" / "minfer-fixture-tiny-qwen3-f32.gguf"
DATA = Path(os.environ.get("MINFER_TESTDATA_DIR", Path(__file__).resolve().parents[1] / "data"))
R1_TEMPLATE = DATA / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"
QWEN3_TEMPLATE = DATA / "templates" / "Qwen-Qwen3-0.6B.jinja"
CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "What is two plus two?"}]

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present")


@pytest.fixture(scope="module")
def r1():
    s = Server("--chat-template-file", R1_TEMPLATE, "--n-ctx", 512, "-t", 2,
               "--reasoning-budget", 6, model=MODEL)
    yield s
    s.kill()


def chat(server, **kw):
    body = {"messages": MSG, "temperature": 0, "max_tokens": 24, **kw}
    status, r = server.post(CHAT, body)
    assert status == 200, r
    return r


def stream(server, **kw):
    body = {"messages": MSG, "temperature": 0, "max_tokens": 24, "stream": True,
            "stream_options": {"include_usage": True}, **kw}
    status, raw = server.request("POST", CHAT, body)
    assert status == 200, raw
    deltas, usage = [], None
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            c = json.loads(line[6:])
            if c.get("usage"):
                usage = c["usage"]
            for ch in c["choices"]:
                deltas.append(ch["delta"])
    return deltas, usage


def n_tokens(server, text):
    status, r = server.post("/tokenize", {"content": text})
    assert status == 200
    return len(r["tokens"])


def test_budget_splits_reasoning_from_the_content_that_follows(r1):
    r = chat(r1, thinking_budget_tokens=8)
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"].strip() and msg["content"].strip()
    for tag in ("<think>", "</think>"):
        assert tag not in msg["reasoning_content"] and tag not in msg["content"]
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8
    assert n_tokens(r1, msg["reasoning_content"]) <= 8 + 2  # re-tokenizing may merge or split a little
    assert r["choices"][0]["finish_reason"] == "length"


def test_server_budget_is_the_default_and_minus_one_lifts_it(r1):
    r = chat(r1)  # --reasoning-budget 6
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 6
    assert r["choices"][0]["message"]["content"].strip()
    r = chat(r1, thinking_budget_tokens=-1)  # never closes: all 24 tokens are reasoning
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 24
    assert r["choices"][0]["message"]["content"] == ""
    assert r["choices"][0]["message"]["reasoning_content"].strip()


def test_stream_sends_reasoning_deltas_before_content_and_matches_the_whole_reply(r1):
    whole = chat(r1, thinking_budget_tokens=8)["choices"][0]["message"]
    deltas, usage = stream(r1, thinking_budget_tokens=8)
    kinds = [("r" if d.get("reasoning_content") else "c") for d in deltas
             if d.get("reasoning_content") or d.get("content")]
    assert "r" in kinds and "c" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "c")  # every r before every c
    assert "".join(d.get("reasoning_content", "") for d in deltas) == whole["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == whole["content"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 8


def test_reasoning_format_none_leaves_the_block_in_the_content(r1):
    split = chat(r1, thinking_budget_tokens=8)["choices"][0]["message"]
    r = chat(r1, thinking_budget_tokens=8, reasoning_format="none")["choices"][0]["message"]
    assert "reasoning_content" not in r
    assert "</think>" in r["content"]
    before, after = r["content"].split("</think>")
    assert before.strip() == split["reasoning_content"]
    assert after.strip() == split["content"].strip()


def test_budget_zero_and_effort_none_mean_no_thinking(r1):
    for kw in ({"thinking_budget_tokens": 0}, {"reasoning_effort": "none"}):
        r = chat(r1, **kw)
        msg = r["choices"][0]["message"]
        assert "reasoning_content" not in msg, kw
        assert msg["content"].strip() and "</think>" not in msg["content"]
        assert "completion_tokens_details" not in r["usage"]


def test_reasoning_effort_low_is_a_256_token_budget(r1):
    r = chat(r1, reasoning_effort="low", max_tokens=40)
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 40  # below 256


SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"},
                                            "unit": {"type": "string", "maxLength": 8}},
          "required": ["answer", "unit"], "additionalProperties": False}


def test_json_schema_applies_after_the_thinking_block_with_the_qwen3_template():
    s = Server("--chat-template-file", QWEN3_TEMPLATE, "--n-ctx", 512, "-t", 2, model=MODEL)
    try:
        status, r = s.post(CHAT, {"messages": MSG, "temperature": 0, "max_tokens": 120,
                                  "thinking_budget_tokens": 16,
                                  "response_format": {"type": "json_schema", "json_schema": {
                                      "name": "a", "schema": SCHEMA}}})
        assert status == 200, r
        msg = r["choices"][0]["message"]
        assert msg["reasoning_content"].strip()
        assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 16
        obj = json.loads(msg["content"])
        try:
            import jsonschema
            jsonschema.validate(obj, SCHEMA)
        except ImportError:
            assert set(obj) == {"answer", "unit"} and isinstance(obj["answer"], int)
        assert r["choices"][0]["finish_reason"] == "stop"
    finally:
        s.kill()


def test_request_chat_template_kwargs_reach_the_template():
    """Qwen3's template writes an empty closed block for enable_thinking false: the
    request's kwargs reach it (render, tokenize and the completion agree), the reply has
    no reasoning; without them the model's block (never closed by this fixture) is all
    reasoning. Not an object, or on /v1/completions: 400."""
    s = Server("--chat-template-file", QWEN3_TEMPLATE, "--n-ctx", 512, "-t", 2, model=MODEL)
    try:
        off = {"chat_template_kwargs": {"enable_thinking": False}}
        status, rendered = s.post("/v1/chat/completions/render", {"messages": MSG, **off})
        assert status == 200, rendered
        assert rendered["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        status, plain = s.post("/v1/chat/completions/render", {"messages": MSG})
        assert status == 200 and plain["prompt"].endswith("<|im_start|>assistant\n")
        status, tok = s.post("/tokenize", {"model": "m", "messages": MSG, **off})
        assert status == 200 and tok["tokens"] == rendered["token_ids"]
        status, r = s.post(CHAT, {"messages": MSG, "temperature": 0, "max_tokens": 12, **off})
        assert status == 200, r
        assert r["usage"]["prompt_tokens"] == rendered["count"]
        assert not r["choices"][0]["message"].get("reasoning_content")
        assert r["usage"].get("completion_tokens_details", {}).get("reasoning_tokens", 0) == 0
        assert r["choices"][0]["message"]["content"]  # the answer starts at once
        for body, path in (({"messages": MSG, "chat_template_kwargs": [1]}, CHAT),
                           ({"messages": MSG, "chat_template_kwargs": "x"}, "/tokenize"),
                           ({"prompt": "hi", "chat_template_kwargs": {}}, "/v1/completions")):
            status, err = s.post(path, body)
            assert status == 400 and "chat_template_kwargs" in err["error"]["message"], err
    finally:
        s.kill()


# --- Anthropic's Messages API (the official SDK) -----------------------------------

def test_anthropic_thinking_blocks_before_the_text_stream_and_not():
    anthropic = pytest.importorskip("anthropic")
    s = Server("--chat-template-file", R1_TEMPLATE, "--n-ctx", 512, "-t", 2, model=MODEL)
    try:
        c = anthropic.Anthropic(base_url=s.url, api_key="unused", max_retries=0, timeout=120)
        kw = dict(model="fixture", max_tokens=24, messages=MSG, extra_body={"temperature": 0},
                  thinking={"type": "enabled", "budget_tokens": 8})
        m = c.messages.create(**kw)
        assert [b.type for b in m.content] == ["thinking", "text"]
        assert m.content[0].thinking.strip() and m.content[0].signature == ""
        assert m.content[1].text.strip() and "</think>" not in m.content[1].text
        with c.messages.stream(**kw) as st:
            kinds = [e.delta.type for e in st if e.type == "content_block_delta"]
            final = st.get_final_message()
        assert kinds.index("text_delta") > max(i for i, k in enumerate(kinds) if k == "thinking_delta")
        assert kinds.count("signature_delta") == 1
        assert [b.type for b in final.content] == ["thinking", "text"]
        assert final.content[0].thinking == m.content[0].thinking
        assert final.content[1].text == m.content[1].text
        # Absent or disabled: no thinking (the block is closed in the prompt).
        for extra in ({}, {"thinking": {"type": "disabled"}}):
            m = c.messages.create(**{**kw, **extra, "thinking": extra.get("thinking", anthropic.NOT_GIVEN)})
            assert [b.type for b in m.content] == ["text"], extra
            assert "</think>" not in m.content[0].text
    finally:
        s.kill()


# --- Ollama's API (the official client) ----------------------------------------------

def test_ollama_think_gives_thinking_in_chat_and_generate_streamed_too(r1):
    ollama = pytest.importorskip("ollama")
    c = ollama.Client(host=r1.url, timeout=120)
    model = json.loads(r1.request("GET", "/v1/models")[1])["data"][0]["id"]
    opts = {"temperature": 0, "num_predict": 24}
    r = c.chat(model=model, messages=MSG, think=True, options=opts)  # --reasoning-budget 6
    assert r.message.thinking.strip() and r.message.content.strip()
    assert "</think>" not in r.message.content
    parts = [(p.message.thinking or "", p.message.content or "")
             for p in c.chat(model=model, messages=MSG, think=True, options=opts, stream=True)]
    last_thinking = max(i for i, (t, _) in enumerate(parts) if t)
    first_content = min(i for i, (_, x) in enumerate(parts) if x)
    assert last_thinking < first_content
    assert "".join(t for t, _ in parts) == r.message.thinking
    assert "".join(x for _, x in parts) == r.message.content
    g = c.generate(model=model, prompt=MSG[0]["content"], think=True, options=opts)
    assert g.thinking == r.message.thinking and g.response == r.message.content
    streamed = list(c.generate(model=model, prompt=MSG[0]["content"], think=True, options=opts,
                               stream=True))
    assert "".join(p.thinking or "" for p in streamed) == g.thinking
    off = c.chat(model=model, messages=MSG, think=False, options=opts)
    assert not off.message.thinking and off.message.content.strip()
    low = c.chat(model=model, messages=MSG, think="low", options=opts)  # 256 > 24: all thinking
    assert low.message.thinking.strip() and low.message.content == ""


# --- OpenAI's Responses API (the official SDK) ---------------------------------------

def test_responses_reasoning_item_before_the_message_with_reasoning_tokens(r1):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=r1.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    kw = dict(model="fixture", input=MSG[0]["content"], temperature=0, max_output_tokens=40,
              reasoning={"effort": "minimal", "summary": "auto"})  # minimal: 64 > 40
    r = c.responses.create(**kw)
    # All 40 tokens are reasoning: the message is there, empty and incomplete.
    assert [i.type for i in r.output] == ["reasoning", "message"]
    assert r.output_text == "" and r.status == "incomplete"
    assert r.usage.output_tokens_details.reasoning_tokens == 40
    # effort none: no thinking, no reasoning item.
    kw["reasoning"] = {"effort": "none"}
    r = c.responses.create(**kw)
    assert [i.type for i in r.output] == ["message"] and r.output_text.strip()
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    # The server's --reasoning-budget 6 when no effort is given: reasoning, then the answer.
    kw["reasoning"] = {"summary": "auto"}
    r = c.responses.create(**kw)
    assert [i.type for i in r.output] == ["reasoning", "message"]
    item = r.output[0]
    assert item.content[0].type == "reasoning_text" and item.content[0].text.strip()
    assert item.summary[0].text == item.content[0].text
    assert r.usage.output_tokens_details.reasoning_tokens == 6
    assert r.output_text.strip() and "</think>" not in r.output_text
    events = list(c.responses.create(**kw, stream=True))
    types = [e.type for e in events]
    assert types.index("response.output_text.delta") > types.index("response.reasoning_text.done")
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == item.content[0].text
    done = events[-1].response
    assert [i.type for i in done.output] == ["reasoning", "message"]
    assert done.output_text == r.output_text
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1]


def test_chat_page_asks_for_the_block_in_the_content(r1):
    # The page collapses <think> spans itself: its requests keep the block in the content.
    status, page = r1.request("GET", "/")
    assert status == 200
    assert b'reasoning_format: "none"' in page


def test_stop_strings_apply_to_the_content_only(r1):
    base = chat(r1, thinking_budget_tokens=8)["choices"][0]["message"]
    thought, answer = base["reasoning_content"], base["content"]
    in_thought = next(w for w in thought.split() if len(w) >= 3 and w not in answer)
    r = chat(r1, thinking_budget_tokens=8, stop=[in_thought])
    assert r["choices"][0]["message"] == base  # the stop string in the reasoning ends nothing
    word = next(w for w in answer.split()[1:] if len(w) >= 3)
    r = chat(r1, thinking_budget_tokens=8, stop=[word])
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] == thought
    assert msg["content"] == answer[:answer.index(word)]
    assert r["choices"][0]["finish_reason"] == "stop"
