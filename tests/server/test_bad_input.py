"""Stage 17 tests: bad input never gets a 5xx. Each kind of malformed request gets a 4xx
with an OpenAI-shaped error {"error": {"message", "type", "code"}}, and the server keeps
serving (health and a real completion afterwards)."""
import json

import pytest

from conftest import needs_model

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]

# (name, path, raw body bytes or a JSON-able object, extra headers, expected status)
CASES = [
    ("malformed_json", CHAT, b'{"messages": [', None, 400),
    ("body_not_object", CHAT, [1, 2, 3], None, 400),
    ("empty_body", CHAT, b"", None, 400),
    ("missing_messages", CHAT, {"model": "m"}, None, 400),
    ("messages_not_array", CHAT, {"messages": "hi"}, None, 400),
    ("empty_messages", CHAT, {"messages": []}, None, 400),
    ("message_not_object", CHAT, {"messages": ["hi"]}, None, 400),
    ("unknown_role", CHAT, {"messages": [{"role": "wizard", "content": "hi"}]}, None, 400),
    ("role_not_string", CHAT, {"messages": [{"role": 3, "content": "hi"}]}, None, 400),
    ("content_wrong_type", CHAT, {"messages": [{"role": "user", "content": 42}]}, None, 400),
    ("image_part", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, None, 400),
    ("temperature_string", CHAT, {"messages": MSG, "temperature": "hot"}, None, 400),
    ("temperature_range", CHAT, {"messages": MSG, "temperature": 7.5}, None, 400),
    ("top_p_range", CHAT, {"messages": MSG, "top_p": 1.5}, None, 400),
    ("top_k_negative", CHAT, {"messages": MSG, "top_k": -3}, None, 400),
    ("min_p_range", CHAT, {"messages": MSG, "min_p": -0.1}, None, 400),
    ("presence_penalty_range", CHAT, {"messages": MSG, "presence_penalty": 3}, None, 400),
    ("max_tokens_string", CHAT, {"messages": MSG, "max_tokens": "ten"}, None, 400),
    ("max_tokens_negative", CHAT, {"messages": MSG, "max_tokens": -5}, None, 400),
    ("n_beyond_slots", CHAT, {"messages": MSG, "n": 64}, None, 400),
    ("stop_wrong_type", CHAT, {"messages": MSG, "stop": 5}, None, 400),
    ("seed_float", CHAT, {"messages": MSG, "seed": 1.5}, None, 400),
    ("logit_bias_bad_key", CHAT, {"messages": MSG, "logit_bias": {"abc": 1}}, None, 400),
    ("logit_bias_out_of_vocab", CHAT, {"messages": MSG, "logit_bias": {"99999999": 1}}, None, 400),
    ("logit_bias_range", CHAT, {"messages": MSG, "logit_bias": {"5": 500}}, None, 400),
    ("top_logprobs_without_logprobs", CHAT, {"messages": MSG, "top_logprobs": 2}, None, 400),
    ("stream_not_bool", CHAT, {"messages": MSG, "stream": "yes"}, None, 400),
    ("response_format_schema", CHAT, {"messages": MSG, "response_format": {"type": "json_schema"}},
     None, 400),
    ("prompt_past_context", CHAT, {"messages": [{"role": "user", "content": "word " * 3000}]},
     None, 400),
    ("completion_missing_prompt", COMP, {"max_tokens": 3}, None, 400),
    ("completion_prompt_bad_ids", COMP, {"prompt": [1, -7]}, None, 400),
    ("completion_prompt_many", COMP, {"prompt": ["a", "b"]}, None, 400),
    ("completion_empty_prompt", COMP, {"prompt": ""}, None, 400),
    ("form_body_not_json", CHAT, b"messages=hi&max_tokens=3",
     {"Content-Type": "application/x-www-form-urlencoded"}, 400),
    ("huge_body", CHAT, b'{"messages": "' + b"x" * (9 << 20) + b'"}', None, 413),
    ("unknown_route", "/v1/nothing", {"a": 1}, None, 404),
    ("deeply_nested_json", CHAT, b"[" * 100000 + b"]" * 100000, None, 400),
    ("invalid_utf8", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', None, 400),
    ("prompt_ids_not_ints", COMP, {"prompt": [[1, "a"]]}, None, 400),
    ("tokenize_no_content", "/tokenize", {"text": "hi"}, None, 400),
    ("detokenize_bad_id", "/detokenize", {"tokens": [10 ** 9]}, None, 400),
    ("reasoning_format_unknown", CHAT, {"messages": MSG, "reasoning_format": "xml"}, None, 400),
    ("reasoning_format_not_string", CHAT, {"messages": MSG, "reasoning_format": 1}, None, 400),
    ("thinking_budget_negative", CHAT, {"messages": MSG, "thinking_budget_tokens": -2}, None, 400),
    ("thinking_budget_float", CHAT, {"messages": MSG, "thinking_budget_tokens": 1.5}, None, 400),
    ("thinking_budget_string", CHAT, {"messages": MSG, "thinking_budget_tokens": "16"}, None, 400),
    ("reasoning_effort_unknown", CHAT, {"messages": MSG, "reasoning_effort": "extreme"}, None, 400),
]


@needs_model
@pytest.mark.parametrize("name,path,body,headers,status", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_4xx_with_openai_error(server, name, path, body, headers, status):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, data = server.request("POST", path, raw=raw, headers=headers)
    assert got == status, (got, data[:300])
    err = json.loads(data)["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    assert err["code"] == status
    assert server.healthy()


@needs_model
def test_context_error_type(server):
    got, body = server.post(CHAT, {"messages": [{"role": "user", "content": "word " * 3000}]})
    assert got == 400 and body["error"]["type"] == "exceed_context_size_error"


@needs_model
def test_still_serving_after_bad_input(server):
    for raw in (b"{", b"[]", b'{"messages": 1}'):
        server.request("POST", CHAT, raw=raw)
    st, body = server.post(COMP, {"prompt": "The capital of France is", "max_tokens": 4,
                                  "temperature": 0})
    assert st == 200 and "Paris" in body["choices"][0]["text"]
    assert server.metrics()["minfer_requests_rejected_total"] >= 3


@needs_model
def test_api_key(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "--api-key", "sekret")
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1})
    assert st == 401 and body["error"]["type"] == "authentication_error"
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1},
                      headers={"Authorization": "Bearer wrong"})
    assert st == 401
    assert s.healthy()  # /health needs no key
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1},
                      headers={"Authorization": "Bearer sekret"})
    assert st == 200 and body["usage"]["completion_tokens"] == 1
