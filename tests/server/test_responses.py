"""Stage 17 tests: OpenAI's Responses API on `minfer serve` (loopback, the real SmolLM2
model) driven by the official `openai` Python SDK — greedy output_text equals the chat
route's for the same messages (one render, one sampler), max_output_tokens → status
incomplete with its reason, the streamed deltas concatenate to the non-streamed text
with usage on the final event and every event numbered in order, a forced function
call whose arguments validate against the parameters schema and its round trip with a
function_call_output, text.format json_schema output that validates, a
previous_response_id chain whose second turn reuses cached prompt tokens, retrieve /
delete / 404 / cancel, --responses-max eviction, and bad input as 4xx in OpenAI's
shape naming the field, the server healthy after."""
import http.client
import json
import time
import urllib.parse

import jsonschema
import pytest

openai = pytest.importorskip("openai")

ASK = "Tell me about the moon."
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 24},
                          "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": WEATHER}]


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_greedy_output_text_equals_the_chat_routes(server):
    c = client(server)
    r = c.responses.create(model="smol", input=ASK, instructions="Be brief.", temperature=0,
                           max_output_tokens=24)
    o = c.chat.completions.create(model="smol", max_tokens=24, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}])
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "smol"
    assert [item.type for item in r.output] == ["message"]
    assert r.output[0].id.startswith("msg_") and r.output[0].role == "assistant"
    assert r.output_text == o.choices[0].message.content != ""
    assert r.usage.input_tokens == o.usage.prompt_tokens
    assert r.usage.output_tokens == o.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.instructions == "Be brief." and r.temperature == 0


def test_input_items_render_like_the_same_chat_messages(server):
    c = client(server)
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Hi, I am Ann."}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Hello Ann!"}]},
             {"role": "user", "content": "What is my name?"}]
    r = c.responses.create(model="smol", input=items, temperature=0, max_output_tokens=12)
    o = c.chat.completions.create(model="smol", max_tokens=12, temperature=0, messages=[
        {"role": "user", "content": "Hi, I am Ann."}, {"role": "assistant", "content": "Hello Ann!"},
        {"role": "user", "content": "What is my name?"}])
    assert r.output_text == o.choices[0].message.content
    assert r.usage.input_tokens == o.usage.prompt_tokens


def test_max_output_tokens_is_incomplete_with_its_reason(server):
    r = client(server).responses.create(model="smol", input=ASK, temperature=0, max_output_tokens=3)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output_text != ""
    done = client(server).responses.create(model="smol", input="Say yes.", temperature=0,
                                           max_output_tokens=200)
    assert done.status == "completed" and done.incomplete_details is None
    assert done.usage.output_tokens < 200


def test_stream_deltas_concatenate_to_the_text_with_usage_at_the_end(server):
    c = client(server)
    whole = c.responses.create(model="smol", input=ASK, temperature=0, max_output_tokens=20)
    events = list(c.responses.create(model="smol", input=ASK, temperature=0, max_output_tokens=20,
                                     stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text != ""
    final = events[-1].response
    assert final.output_text == deltas and final.status == "incomplete"
    assert events[-2].item.status == final.output[0].status == "incomplete"
    assert final.usage.output_tokens == 20 and final.usage.input_tokens == whole.usage.input_tokens
    # The SDK's responses.stream() accumulates the same response (it ends only on
    # response.completed: a response that finishes).
    short = c.responses.create(model="smol", input="Say yes.", temperature=0, max_output_tokens=200)
    with c.responses.stream(model="smol", input="Say yes.", temperature=0,
                            max_output_tokens=200) as s:
        got = s.get_final_response()
    assert short.status == got.status == "completed"
    assert got.output_text == short.output_text != ""
    assert got.usage.output_tokens == short.usage.output_tokens


def test_forced_function_call_matches_the_schema_and_round_trips(server):
    c = client(server)
    r = c.responses.create(model="smol", input="What is the weather in Paris?", temperature=0,
                           max_output_tokens=80, tools=TOOLS,
                           tool_choice={"type": "function", "name": "get_weather"})
    assert r.status == "completed"
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert call.id.startswith("fc_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    # The call and its output go back; the model answers in text.
    after = c.responses.create(model="smol", temperature=0, max_output_tokens=24, tools=TOOLS,
                               tool_choice="none", input=[
                                   {"role": "user", "content": "What is the weather in Paris?"},
                                   {"type": "function_call", "call_id": call.call_id,
                                    "name": call.name, "arguments": call.arguments},
                                   {"type": "function_call_output", "call_id": call.call_id,
                                    "output": "Sunny, 21 degrees"}])
    assert [item.type for item in after.output] == ["message"] and after.output_text != ""
    # The call and its output are in the prompt: more tokens than the question alone.
    alone = c.responses.create(model="smol", temperature=0, max_output_tokens=1, tools=TOOLS,
                               tool_choice="none", input="What is the weather in Paris?")
    assert after.usage.input_tokens > alone.usage.input_tokens + 10
    # The same through previous_response_id: the stored call is the history.
    chained = c.responses.create(model="smol", temperature=0, max_output_tokens=24, tools=TOOLS,
                                 tool_choice="none", previous_response_id=r.id, input=[
                                     {"type": "function_call_output", "call_id": call.call_id,
                                      "output": "Sunny, 21 degrees"}])
    assert chained.output_text == after.output_text
    assert chained.usage.input_tokens == after.usage.input_tokens


def test_streamed_function_call_events(server):
    events = list(client(server).responses.create(
        model="smol", input="What is the weather in Paris?", temperature=0, max_output_tokens=80,
        tools=TOOLS, tool_choice="required", stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].name == "get_weather"
    jsonschema.validate(json.loads(done[0].arguments), WEATHER)
    assert types[-1] == "response.completed"
    assert [item.type for item in events[-1].response.output] == ["function_call"]


def test_text_format_json_schema_output_validates(server):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client(server).responses.create(
        model="smol", input="Invent a person.", temperature=0, max_output_tokens=120,
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"
    obj = client(server).responses.create(
        model="smol", input="Give a JSON object with the key 'a' set to 1.", temperature=0,
        max_output_tokens=200, text={"format": {"type": "json_object"}})
    assert obj.status == "completed", obj.output_text
    assert isinstance(json.loads(obj.output_text), dict)


def test_previous_response_id_chains_and_reuses_the_cached_prefix(server):
    c = client(server)
    first = c.responses.create(model="smol", input="My name is Ann. Remember it.", temperature=0,
                               max_output_tokens=16, instructions="Be brief.")
    second = c.responses.create(model="smol", input="What is my name?", temperature=0,
                                max_output_tokens=16, previous_response_id=first.id,
                                instructions="Be brief.")
    assert second.previous_response_id == first.id
    # The first turn's render is a prefix of the second's: its KV cells are reused.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens
    assert cached < second.usage.input_tokens
    # The same conversation given whole renders the same prompt.
    whole = c.responses.create(model="smol", temperature=0, max_output_tokens=16,
                               instructions="Be brief.", input=[
                                   {"role": "user", "content": "My name is Ann. Remember it."},
                                   {"role": "assistant", "content": first.output_text},
                                   {"role": "user", "content": "What is my name?"}])
    assert whole.output_text == second.output_text
    assert whole.usage.input_tokens == second.usage.input_tokens


def test_retrieve_delete_cancel_and_404(server):
    c = client(server)
    r = c.responses.create(model="smol", input="Say hi.", temperature=0, max_output_tokens=4,
                           metadata={"k": "v"})
    got = c.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.metadata == {"k": "v"}
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.cancel(r.id)
    assert "background" in e.value.response.json()["error"]["message"]
    deleted = c.responses.delete(r.id)
    assert deleted is None  # the SDK returns nothing; the body is checked below
    for call in (lambda: c.responses.retrieve(r.id), lambda: c.responses.delete(r.id),
                 lambda: c.responses.cancel(r.id)):
        with pytest.raises(openai.NotFoundError) as e:
            call()
        assert r.id in e.value.response.json()["error"]["message"]
    r2 = c.responses.create(model="smol", input="Say hi.", max_output_tokens=2)
    status, body = server.request("DELETE", f"/v1/responses/{r2.id}")
    assert status == 200 and json.loads(body) == {"id": r2.id, "object": "response",
                                                  "deleted": True}
    unstored = c.responses.create(model="smol", input="Say hi.", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(unstored.id)
    # A method the route lacks is a 405 listing the pattern route's methods.
    status, body = server.request("POST", f"/v1/responses/{r2.id}", {"input": "x"})
    assert status == 405 and "GET, HEAD, DELETE, OPTIONS" in json.loads(body)["error"]["message"]
    status, body = server.request("GET", f"/v1/responses/{r2.id}/cancel")
    assert status == 405 and "POST, OPTIONS" in json.loads(body)["error"]["message"]


def test_responses_max_evicts_the_oldest(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 2, "--responses-max", 2)
    c = client(s)
    ids = [c.responses.create(model="smol", input="Hi", max_output_tokens=1).id for _ in range(3)]
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[0])
    assert [c.responses.retrieve(i).id for i in ids[1:]] == ids[1:]
    # A deleted one frees its place: the next evicts nothing, the one after the oldest.
    c.responses.delete(ids[1])
    ids.append(c.responses.create(model="smol", input="Hi", max_output_tokens=1).id)
    assert [c.responses.retrieve(i).id for i in ids[2:]] == ids[2:]
    ids.append(c.responses.create(model="smol", input="Hi", max_output_tokens=1).id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[2])
    assert [c.responses.retrieve(i).id for i in ids[3:]] == ids[3:]
    # --responses-max 0 keeps none; chaining onto one is then a 404.
    s0 = make_server("--slots", 1, "--n-ctx", 256, "-t", 2, "--responses-max", 0)
    r = client(s0).responses.create(model="smol", input="Hi", max_output_tokens=1)
    with pytest.raises(openai.NotFoundError):
        client(s0).responses.create(model="smol", input="Hi", previous_response_id=r.id)


def sse_events(raw):
    """(event name, data) pairs of an SSE body."""
    out = []
    for block in raw.strip().split("\n\n"):
        lines = dict(ln.split(": ", 1) for ln in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_failure_mid_stream_is_an_error_event_then_response_failed(make_server):
    # Two signals end the drain at once: the running job ends with an error event.
    s = make_server("--slots", 1, "--n-ctx", 1024, "-t", 2)
    host, port = urllib.parse.urlsplit(s.url).netloc.split(":")
    body = {"input": "Count:", "max_output_tokens": 900, "stream": True,
            "logit_bias": {"2": -100, "0": -100}}  # no end-of-generation token
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/responses", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    head = b""
    while b"response.output_text.delta" not in head:  # a token arrived: the job runs
        head += r.readline()
    s.terminate()
    time.sleep(0.3)
    s.terminate()
    raw = (head + r.read()).decode()
    conn.close()
    events = sse_events(raw)
    assert all(name == data["type"] for name, data in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert [name for name, _ in events[-2:]] == ["error", "response.failed"]
    assert events[-2][1]["message"] == "the server is shutting down"
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["message"] == "the server is shutting down"
    assert s.proc.wait(60) == 0


BAD = [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input_image"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input_file"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "reasoning"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
     "input[0].arguments"),
    ({"previous_response_id": "resp_nope"}, "resp_nope"),
    ({"tools": [{"type": "web_search"}]}, "web_search"),
    ({"tools": [{"type": "function", "name": "f", "parameters": "x"}]}, "tools[0].parameters"),
    ({"tool_choice": {"type": "file_search"}}, "file_search"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "nope"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}},
     "schema"),
    ({"text": {"format": {"type": "yaml"}}}, "yaml"),
    ({"max_output_tokens": -1}, "max_output_tokens"),
    ({"max_output_tokens": "10"}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"instructions": 1}, "instructions"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"store": "yes"}, "store"),
    ({"background": True}, "background"),
    ({"reasoning": "high"}, "reasoning"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"reasoning": {"summary": 3}}, "reasoning.summary"),
]


@pytest.mark.parametrize("extra,named", BAD, ids=[f"{i}-{n}" for i, (_, n) in enumerate(BAD)])
def test_bad_input_is_4xx_in_openais_shape_naming_the_field(server, extra, named):
    body = {"model": "smol", "input": "Hi", "max_output_tokens": 4, **extra}
    if "input" not in extra and extra == {}:
        del body["input"]
    status, data = server.request("POST", "/v1/responses", body)
    assert 400 <= status < 500, (status, data)
    err = json.loads(data)["error"]
    assert err["type"] == "invalid_request_error" and named in err["message"], err
    if named == "resp_nope":
        assert status == 404
    assert server.healthy()


def test_non_json_body_is_400_and_the_route_is_also_unversioned(server):
    status, data = server.request("POST", "/v1/responses", raw=b"{nope")
    assert status == 400 and "error" in json.loads(data)
    status, data = server.post("/responses", {"input": "Hi", "max_output_tokens": 2})
    assert status == 200 and data["object"] == "response"
    assert server.request("GET", f"/responses/{data['id']}")[0] == 200
