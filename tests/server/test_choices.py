"""Stage 17: what the completion routes give beyond one answer — `n` choices decoded side
by side as separate sequences of one request (choice i seeded seed + i), `echo` on
/v1/completions, and a chat request ending in an assistant message continued (prefill).
A real `minfer serve` on loopback with the SmolLM2 model, 4 slots."""
import http.client
import json
import socket

import pytest

from conftest import needs_model

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MSG = [{"role": "user", "content": "Write a short poem about the sea."}]
PROMPT = "Once upon a time, in a land far away,"

pytestmark = needs_model


def chat(server, **kw):
    body = {"messages": MSG, "max_tokens": 16, **kw}
    status, r = server.post(CHAT, body)
    assert status == 200, r
    return r


def complete(server, **kw):
    body = {"prompt": PROMPT, "max_tokens": 16, **kw}
    status, r = server.post(COMPLETIONS, body)
    assert status == 200, r
    return r


def stream_texts(server, path, body):
    """Each choice's text assembled from the SSE chunks; its finish_reason chunks; the
    usage chunk; how many [DONE] lines."""
    status, raw = server.request("POST", path, {**body, "stream": True,
                                                 "stream_options": {"include_usage": True}})
    assert status == 200, raw
    texts, finishes, usage, done = {}, {}, None, 0
    for line in raw.decode().splitlines():
        if line == "data: [DONE]":
            done += 1
        elif line.startswith("data: "):
            c = json.loads(line[6:])
            assert done == 0, "a chunk after [DONE]"
            if c.get("usage"):
                usage = c["usage"]
            for ch in c["choices"]:
                i = ch["index"]
                piece = ch["delta"].get("content") if "delta" in ch else ch["text"]
                texts[i] = texts.get(i, "") + (piece or "")
                if ch["finish_reason"] is not None:
                    finishes.setdefault(i, []).append(ch["finish_reason"])
    return texts, finishes, usage, done


def test_seeded_n3_chat_choice_i_equals_the_n1_answer_of_seed_plus_i(server):
    r = chat(server, n=3, seed=1234, temperature=1.0)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    texts = [c["message"]["content"] for c in r["choices"]]
    ones = [chat(server, seed=1234 + i, temperature=1.0) for i in range(3)]
    assert texts[0] == ones[0]["choices"][0]["message"]["content"]
    assert texts[2] == ones[2]["choices"][0]["message"]["content"]
    # Different seeds at temperature 1 give different texts here.
    assert len(set(texts)) > 1, texts
    # Usage: the prompt once, the completions summed.
    u = r["usage"]
    assert u["prompt_tokens"] == ones[0]["usage"]["prompt_tokens"]
    assert u["completion_tokens"] == sum(o["usage"]["completion_tokens"] for o in ones)
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    # Reproducible.
    again = chat(server, n=3, seed=1234, temperature=1.0)
    assert [c["message"]["content"] for c in again["choices"]] == texts


def test_seeded_n3_completions_choice_i_equals_the_n1_answer_of_seed_plus_i(server):
    r = complete(server, n=3, seed=77, temperature=1.0)
    texts = [c["text"] for c in r["choices"]]
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert texts[0] == complete(server, seed=77, temperature=1.0)["choices"][0]["text"]
    assert texts[1] == complete(server, seed=78, temperature=1.0)["choices"][0]["text"]
    assert texts[2] == complete(server, seed=79, temperature=1.0)["choices"][0]["text"]


def test_n3_stream_assembles_to_the_non_streamed_texts(server):
    body = {"messages": MSG, "max_tokens": 16, "n": 3, "seed": 99, "temperature": 1.0}
    whole = chat(server, n=3, seed=99, temperature=1.0)
    texts, finishes, usage, done = stream_texts(server, CHAT, body)
    assert texts == {c["index"]: c["message"]["content"] for c in whole["choices"]}
    assert finishes == {i: [whole["choices"][i]["finish_reason"]] for i in range(3)}
    assert done == 1
    assert usage["prompt_tokens"] == whole["usage"]["prompt_tokens"]
    assert usage["completion_tokens"] == whole["usage"]["completion_tokens"]

    cbody = {"prompt": PROMPT, "max_tokens": 16, "n": 2, "seed": 5, "temperature": 1.0}
    cwhole = complete(server, n=2, seed=5, temperature=1.0)
    ctexts, cfin, _, cdone = stream_texts(server, COMPLETIONS, cbody)
    assert ctexts == {c["index"]: c["text"] for c in cwhole["choices"]}
    assert sorted(cfin) == [0, 1] and cdone == 1


def test_greedy_n2_gives_identical_choices(server):
    r = chat(server, n=2, temperature=0)
    a, b = (c["message"]["content"] for c in r["choices"])
    assert a == b and a
    assert a == chat(server, temperature=0)["choices"][0]["message"]["content"]


def test_n_choices_share_a_cached_prompt_prefill(server):
    # The prompt cached by a first request: every choice takes its cells (none prefills
    # the prompt again).
    body = {"prompt": PROMPT + " there lived", "max_tokens": 4, "temperature": 0}
    complete(server, **body)
    m1 = server.metrics()
    r = complete(server, prompt=body["prompt"], max_tokens=4, temperature=0, n=3)
    m2 = server.metrics()
    n_prompt = r["usage"]["prompt_tokens"]
    reused = m2["minfer_prefix_reused_tokens_total"] - m1["minfer_prefix_reused_tokens_total"]
    assert reused == 3 * (n_prompt - 1), (reused, n_prompt)
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt - 1


def test_n_choices_of_a_new_prompt_prefill_it_once(server):
    # Choice 0 prefills the prompt; the others are admitted after that prefill and take
    # its cells (n_prompt - 1 each: the last prompt token is always decoded).
    prompt = "Zebras 7391 quietly juggle violet teapots while"
    m1 = server.metrics()
    r = complete(server, prompt=prompt, max_tokens=4, temperature=0, n=3)
    m2 = server.metrics()
    n_prompt = r["usage"]["prompt_tokens"]
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    reused = m2["minfer_prefix_reused_tokens_total"] - m1["minfer_prefix_reused_tokens_total"]
    assert reused == 2 * (n_prompt - 1), (reused, n_prompt)
    assert m2["minfer_prompt_tokens_total"] - m1["minfer_prompt_tokens_total"] == 3 * n_prompt


@pytest.mark.parametrize("n,word", [(5, "at most 4"), (0, "'n' must be in"),
                                     (1.5, "'n' must be an integer"), ("2", "'n'")])
def test_bad_n_is_a_400_naming_it(server, n, word):
    for path, body in ((CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": PROMPT})):
        status, r = server.post(path, {**body, "n": n})
        assert status == 400, r
        assert word in r["error"]["message"], r


def test_client_leaving_a_stream_cancels_all_n_choices(make_server):
    s = make_server("--slots", 3, "--n-ctx", 1024, "-t", 2)
    conn = http.client.HTTPConnection(s.url.split("//")[1], timeout=60)
    conn.request("POST", CHAT, json.dumps({
        "messages": [{"role": "user", "content": "Tell me a long story."}], "n": 3,
        "max_tokens": 900, "stream": True, "seed": 1, "logit_bias": {"2": -100, "0": -100}}),
        {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    seen = set()
    while len(seen) < 3:
        line = resp.fp.readline()
        if line.startswith(b"data: "):
            for ch in json.loads(line[6:])["choices"]:
                if ch["delta"].get("content"):
                    seen.add(ch["index"])
    assert s.metrics()["minfer_requests_running"] == 3
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    m = s.wait_metric("minfer_requests_running", lambda v: v == 0, timeout_s=20)
    assert m["minfer_requests_cancelled_total"] == 3
    assert m["minfer_completion_tokens_total"] < 3 * 900


def test_echo_prepends_the_prompt_to_every_choice(server):
    plain = complete(server, temperature=0, n=2)
    r = complete(server, temperature=0, n=2, echo=True)
    for c, p in zip(r["choices"], plain["choices"]):
        assert c["text"] == PROMPT + p["text"]
    # Token ids as the prompt: their text is echoed.
    status, tok = server.post("/tokenize", {"content": PROMPT})
    ids = complete(server, temperature=0, echo=True, prompt=tok["tokens"])
    assert ids["choices"][0]["text"] == PROMPT + plain["choices"][0]["text"]
    # Streamed: the prompt is each choice's first chunk.
    status, raw = server.request("POST", COMPLETIONS, {"prompt": PROMPT, "max_tokens": 16,
                                                       "temperature": 0, "echo": True,
                                                       "stream": True})
    assert status == 200
    first = json.loads(raw.decode().split("\n\n")[0][6:])
    assert first["choices"][0]["text"] == PROMPT
    texts, _, _, _ = stream_texts(server, COMPLETIONS, {"prompt": PROMPT, "max_tokens": 16,
                                                        "temperature": 0, "echo": True})
    assert texts[0] == PROMPT + plain["choices"][0]["text"]


def test_echo_with_logprobs_is_a_400_naming_both(server):
    status, r = server.post(COMPLETIONS, {"prompt": PROMPT, "echo": True, "logprobs": 2})
    assert status == 400, r
    assert "'echo'" in r["error"]["message"] and "'logprobs'" in r["error"]["message"]


def test_a_final_assistant_message_is_continued_as_the_same_text_completion(server):
    user = [{"role": "user", "content": "Tell me one fact about France."}]
    prefill = "The capital of France is"
    status, rendered = server.post("/v1/chat/completions/render", {"messages": user})
    assert status == 200, rendered
    text = rendered["prompt"] + prefill
    want = complete(server, prompt=text, temperature=0, max_tokens=12)["choices"][0]["text"]
    msgs = user + [{"role": "assistant", "content": prefill}]
    got = chat(server, messages=msgs, temperature=0, max_tokens=12)
    assert got["choices"][0]["message"]["content"] == want
    assert want and not want.startswith(prefill)
    # The prompt is the open turn: no end-of-turn after the prefill.
    status, open_turn = server.post("/v1/chat/completions/render", {"messages": msgs})
    assert status == 200 and open_turn["prompt"] == text
    texts, _, _, _ = stream_texts(server, CHAT, {"messages": msgs, "temperature": 0,
                                                 "max_tokens": 12})
    assert texts[0] == want
