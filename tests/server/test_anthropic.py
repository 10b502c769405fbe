"""Stage 17 tests: Anthropic's Messages API on `minfer serve` (loopback, the real
SmolLM2 model) driven by the official `anthropic` Python SDK — greedy text equals the
OpenAI chat route's for the same messages (one render, one sampler), stop_reason
max_tokens / end_turn / stop_sequence (with the matched string), the SDK's stream
accumulates the same text with usage, system as a string and as blocks, count_tokens
equals usage.input_tokens, a forced tool call whose input validates against the
input_schema (stream and not) and its round trip with a tool_result, Anthropic's SSE
event order, and errors in Anthropic's shape (400 invalid_request_error naming the
field or block, 401 authentication_error, x-api-key and Bearer both accepted)."""
import json
import urllib.request

import jsonschema
import pytest

from conftest import MODEL

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

ASK = [{"role": "user", "content": "Tell me about the moon."}]
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 24},
                          "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "Current weather in a city", "input_schema": WEATHER}]


# This SDK release has no temperature / top_p / top_k parameters (newer Claude models
# take none); the server takes them, so they go in the body as extra fields.
GREEDY = {"temperature": 0}


def client(server, key="unused"):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=120)


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def test_greedy_text_equals_the_openai_chat_routes(server):
    m = client(server).messages.create(model="smol", max_tokens=24, extra_body=GREEDY, messages=ASK)
    o = oai(server).chat.completions.create(model="smol", max_tokens=24, temperature=0, messages=ASK)
    assert m.type == "message" and m.role == "assistant" and m.model == "smol"
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert text_of(m) == o.choices[0].message.content
    assert text_of(m) != ""
    assert m.usage.input_tokens == o.usage.prompt_tokens
    assert m.usage.output_tokens == o.usage.completion_tokens == 24


def test_stop_reason_max_tokens_and_end_turn(server):
    c = client(server)
    cut = c.messages.create(model="smol", max_tokens=3, extra_body=GREEDY, messages=ASK)
    assert cut.stop_reason == "max_tokens" and cut.stop_sequence is None
    assert cut.usage.output_tokens == 3
    ask = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
    done = c.messages.create(model="smol", max_tokens=200, extra_body=GREEDY, messages=ask)
    assert done.stop_reason == "end_turn" and done.stop_sequence is None
    assert 0 < done.usage.output_tokens < 200


def test_stop_sequences_report_the_matched_string(server):
    c = client(server)
    full = text_of(c.messages.create(model="smol", max_tokens=24, extra_body=GREEDY, messages=ASK))
    words = full.split()
    assert len(words) >= 4, full
    stop = " " + words[2]
    m = c.messages.create(model="smol", max_tokens=24, extra_body=GREEDY, messages=ASK,
                          stop_sequences=["@@never@@", stop])
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == stop
    assert text_of(m) == full[:full.index(stop)]


def test_sdk_stream_accumulates_the_non_streamed_text_with_usage(server):
    c = client(server)
    whole = c.messages.create(model="smol", max_tokens=24, extra_body=GREEDY, messages=ASK)
    with c.messages.stream(model="smol", max_tokens=24, extra_body=GREEDY, messages=ASK) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text_of(whole)
    assert text_of(final) == text_of(whole)
    assert final.stop_reason == "max_tokens"
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == 24


def test_stream_event_order(server):
    body = json.dumps({"model": "smol", "max_tokens": 6, "temperature": 0, "stream": True,
                       "messages": ASK}).encode()
    req = urllib.request.Request(server.url + "/v1/messages", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = []
    for frame in raw.strip().split("\n\n"):
        lines = frame.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        events.append((name, data))
    names = [n for n, _ in events if n != "ping"]
    assert names[0] == "message_start" and names[1] == "content_block_start"
    assert set(names[2:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["usage"]["input_tokens"] > 0
    delta = [d for n, d in events if n == "message_delta"][0]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 6


def test_system_as_string_and_as_blocks_render_the_same(server):
    c = client(server)
    system = "You are a pirate. Answer like one."
    as_string = c.messages.create(model="smol", max_tokens=16, extra_body=GREEDY, system=system,
                                  messages=ASK)
    as_blocks = c.messages.create(model="smol", max_tokens=16, extra_body=GREEDY,
                                  system=[{"type": "text", "text": system}], messages=ASK)
    o = oai(server).chat.completions.create(
        model="smol", max_tokens=16, temperature=0,
        messages=[{"role": "system", "content": system}, *ASK])
    assert text_of(as_string) == text_of(as_blocks) == o.choices[0].message.content
    assert as_string.usage.input_tokens == as_blocks.usage.input_tokens == o.usage.prompt_tokens
    # Without one the template writes its own default system prompt: another count.
    plain = c.messages.count_tokens(model="smol", messages=ASK).input_tokens
    assert as_string.usage.input_tokens != plain


def test_count_tokens_equals_usage_input_tokens(server):
    c = client(server)
    for kw in ({"messages": ASK}, {"messages": ASK, "system": "Be brief."},
               {"messages": ASK, "tools": TOOLS}):
        n = c.messages.count_tokens(model="smol", **kw).input_tokens
        m = c.messages.create(model="smol", max_tokens=2, extra_body=GREEDY, **kw)
        assert n == m.usage.input_tokens > 0


def test_forced_tool_call_matches_the_schema_and_round_trips(server):
    c = client(server)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = c.messages.create(model="smol", max_tokens=80, extra_body=GREEDY, tools=TOOLS,
                          tool_choice={"type": "tool", "name": "get_weather"}, messages=ask)
    assert m.stop_reason == "tool_use"
    calls = [b for b in m.content if b.type == "tool_use"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert isinstance(call.input, dict)
    jsonschema.validate(call.input, WEATHER)
    # The call and its result go back; the model answers in text.
    history = ask + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                   "content": "Sunny, 21 degrees"}]}]
    after = c.messages.create(model="smol", max_tokens=24, extra_body=GREEDY, tools=TOOLS,
                              tool_choice={"type": "none"}, messages=history)
    assert after.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in after.content] == ["text"] and text_of(after) != ""
    # The call and its result are in the prompt: more tokens than the question alone.
    alone = c.messages.count_tokens(model="smol", tools=TOOLS, tool_choice={"type": "none"},
                                    messages=ask).input_tokens
    assert after.usage.input_tokens > alone + 10


def test_streamed_tool_call_accumulates_to_the_input(server):
    c = client(server)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    with c.messages.stream(model="smol", max_tokens=80, extra_body=GREEDY, tools=TOOLS,
                           tool_choice={"type": "any"}, messages=ask) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    calls = [b for b in final.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, WEATHER)
    assert final.usage.output_tokens > 0


def error_of(exc):
    body = exc.response.json()
    assert body["type"] == "error", body
    return body["error"]


def test_missing_max_tokens_is_400_invalid_request_error(server):
    c = client(server)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.post("/v1/messages", cast_to=object, body={"model": "smol", "messages": ASK})
    assert e.value.status_code == 400
    err = error_of(e.value)
    assert err["type"] == "invalid_request_error" and "max_tokens" in err["message"]


@pytest.mark.parametrize("block,named", [
    ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}, "image"),
    ({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
     "document"),
])
def test_image_and_document_blocks_are_400_naming_them(server, block, named):
    c = client(server)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model="smol", max_tokens=4, messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, block]}])
    err = error_of(e.value)
    assert err["type"] == "invalid_request_error"
    assert f"'{named}'" in err["message"] and "messages[0].content[1]" in err["message"]


@pytest.mark.parametrize("extra,named", [
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": -5}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": "many"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "sometimes"}}, "'thinking'"),
    ({"thinking": True}, "'thinking'"),
    ({"temperature": 1.5}, "temperature"),
    ({"stop_sequences": "x"}, "stop_sequences"),
    ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": TOOLS}, "nope"),
    ({"tools": [{"name": "f"}]}, "input_schema"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search_20250305"),
    ({"tool_choice": {"type": "sometimes"}}, "sometimes"),
    ({"system": [{"type": "image"}]}, "system[0]"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}, "assistant"),
    ({"messages": [*ASK, {"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}, *ASK]}, "messages[1].content[0]"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]}, "is_error"),
])
def test_unsupported_or_bad_fields_are_400_naming_them(server, extra, named):
    body = {"model": "smol", "max_tokens": 4, "messages": ASK, **extra}
    with pytest.raises(anthropic.BadRequestError) as e:
        client(server).post("/v1/messages", cast_to=object, body=body)
    err = error_of(e.value)
    assert err["type"] == "invalid_request_error" and named in err["message"], err


def test_assistant_prefill_is_refused(server):
    with pytest.raises(anthropic.BadRequestError) as e:
        client(server).messages.create(model="smol", max_tokens=4, messages=[
            *ASK, {"role": "assistant", "content": "The moon"}])
    assert "prefill" in error_of(e.value)["message"]


def test_disabled_thinking_and_metadata_are_accepted(server):
    m = client(server).messages.create(model="smol", max_tokens=2, extra_body=GREEDY, messages=ASK,
                                       thinking={"type": "disabled"},
                                       metadata={"user_id": "someone"})
    assert m.usage.output_tokens == 2


def test_unknown_route_below_messages_is_404_not_found_error(server):
    status, body = server.request("POST", "/v1/messages/nope", {"x": 1})
    assert status == 404
    assert json.loads(body) == {"type": "error",
                                "error": {"type": "not_found_error", "message": "no such route"}}


def test_api_key_by_x_api_key_or_bearer(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "--api-key", "sekret")
    with pytest.raises(anthropic.AuthenticationError) as e:
        client(s, key="wrong").messages.create(model="smol", max_tokens=2, messages=ASK)
    assert e.value.status_code == 401
    assert error_of(e.value)["type"] == "authentication_error"
    # The SDK sends x-api-key; it opens the Anthropic routes and the OpenAI ones.
    m = client(s, key="sekret").messages.create(model="smol", max_tokens=2, messages=ASK)
    assert m.usage.output_tokens == 2
    status, _ = s.request("GET", "/v1/models", headers={"x-api-key": "sekret"})
    assert status == 200
    status, body = s.request("POST", "/v1/messages/count_tokens", {"messages": ASK},
                             headers={"Authorization": "Bearer sekret"})
    assert status == 200 and json.loads(body)["input_tokens"] > 0
    status, body = s.request("POST", "/v1/messages/count_tokens", {"messages": ASK})
    assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    # The OpenAI routes keep OpenAI's error shape.
    status, body = s.request("GET", "/v1/models")
    assert status == 401 and json.loads(body)["error"]["code"] == 401
