"""Stage 17 tests: OpenAI tool calling through `minfer serve` on loopback with the openai
client and the real SmolLM2 model — tool_choice required and a named function give
well-formed `tool_calls` (a name of the tools, arguments that parse and validate against
the tool's parameter schema, finish_reason tool_calls), stream and not, with a
Qwen2.5-style template (<tool_call>), a Llama-3.1-style template (JSON
{"name", "parameters"}) and the model's own template, which has no tools support (the
generic JSON format, as llama-server does); auto parses a call when the output has one
and leaves plain text as content; a history with calls and tool results renders;
bad tools are 400s before a slot is taken."""
import json
from pathlib import Path

import jsonschema
import pytest

from conftest import MODEL, Server, needs_model

openai = pytest.importorskip("openai")

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
QWEN = TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"
LLAMA3 = TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja"

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 24},
                          "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                        "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                           "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module", params=["qwen", "llama3", "own"])
def server(request):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
    extra = {"qwen": ["--chat-template-file", QWEN], "llama3": ["--chat-template-file", LLAMA3],
             "own": []}[request.param]
    s = Server("--slots", 2, "--n-ctx", 2048, "-t", 2, *extra)
    s.kind = request.param
    yield s
    s.kill()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def collect_stream(chunks):
    """Accumulates streamed tool calls the way OpenAI clients do (by index)."""
    calls, content, finish = {}, "", None
    for ch in chunks:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        finish = ch.choices[0].finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, finish


def check_call(name, arguments, allowed):
    assert name in allowed, name
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMAS[name])


@needs_model
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "add"])
def test_forced_choice_gives_a_call_matching_the_schema(server, stream, choice):
    tool_choice = choice if choice == "required" else {"type": "function",
                                                       "function": {"name": choice}}
    allowed = {"get_weather", "add"} if choice == "required" else {choice}
    c = client(server)
    for seed in (1,):
        kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice=tool_choice, temperature=1.0,
                  seed=seed, max_tokens=120)
        if stream:
            calls, content, finish = collect_stream(c.chat.completions.create(stream=True, **kw))
            assert finish == "tool_calls", (server.kind, content)
            assert content == ""
            assert len(calls) == 1 and calls[0]["id"].startswith("call_")
            check_call(calls[0]["name"], calls[0]["arguments"], allowed)
        else:
            r = c.chat.completions.create(**kw)
            ch = r.choices[0]
            assert ch.finish_reason == "tool_calls", (server.kind, ch.message)
            assert ch.message.content is None
            assert len(ch.message.tool_calls) == 1
            tc = ch.message.tool_calls[0]
            assert tc.type == "function" and tc.id.startswith("call_")
            check_call(tc.function.name, tc.function.arguments, allowed)


@needs_model
def test_auto_parses_a_call_when_the_output_has_one(server):
    if server.kind != "qwen":
        pytest.skip("the Hermes <tool_call> form (Qwen template) is the auto case here")
    # SmolLM2-135M does not write <tool_call> by itself; a `grammar` (allowed with auto,
    # which adds none) makes its output text + a tagged call, which the parser must split.
    call = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
    gbnf = ('root ::= [A-Za-z ]{1,20} "\\n<tool_call>\\n" '
            + json.dumps(call) + ' "\\n</tool_call>"')
    c = client(server)
    kw = dict(model="m", messages=ASK, tools=TOOLS, temperature=1.0, seed=4, max_tokens=80,
              extra_body={"grammar": gbnf})
    r = c.chat.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch.message
    assert ch.message.content and "<tool_call>" not in ch.message.content
    assert [t.function.name for t in ch.message.tool_calls] == ["get_weather"]
    assert json.loads(ch.message.tool_calls[0].function.arguments) == {"city": "Paris",
                                                                        "unit": "celsius"}
    calls, content, finish = collect_stream(c.chat.completions.create(stream=True, **kw))
    assert finish == "tool_calls" and content == ch.message.content  # same seed, same text
    assert [x["name"] for x in calls] == ["get_weather"]
    # Plain text under auto stays content, without tool_calls.
    r = c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0.0,
                                  max_tokens=24)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content


@needs_model
def test_history_with_calls_and_results_round_trips(server):
    c = client(server)
    first = c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                      temperature=1.0, seed=5, max_tokens=120)
    tc = first.choices[0].message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": tc.id, "type": "function",
                         "function": {"name": tc.function.name, "arguments": tc.function.arguments}}]},
        {"role": "tool", "tool_call_id": tc.id, "content": "21 degrees, sunny"},
    ]
    r = c.chat.completions.create(model="m", messages=history, tools=TOOLS, tool_choice="none",
                                  temperature=0.0, max_tokens=16)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].message.tool_calls is None
    # The call and the result are in the prompt: it is longer than the question alone.
    plain = c.chat.completions.create(model="m", messages=ASK, tool_choice="none", tools=TOOLS,
                                      temperature=0.0, max_tokens=1)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 10
    # And a second forced call after the history still parses.
    again = c.chat.completions.create(model="m", messages=history, tools=TOOLS,
                                      tool_choice={"type": "function", "function": {"name": "add"}},
                                      temperature=1.0, seed=6, max_tokens=120)
    check_call(again.choices[0].message.tool_calls[0].function.name,
               again.choices[0].message.tool_calls[0].function.arguments, {"add"})


@needs_model
@pytest.mark.parametrize("body,needle", [
    ({"tools": {"type": "function"}}, "'tools' must be an array"),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}]},
     "unsupported keyword 'not'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "'mul'"),
    ({"tools": TOOLS, "tool_choice": "required", "grammar": 'root ::= "x"'}, "cannot be combined"),
])
def test_bad_tools_are_400s_before_a_slot(server, body, needle):
    if server.kind != "qwen":
        pytest.skip("validation does not depend on the template")
    before = server.metrics()["minfer_requests_total"]
    status, resp = server.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 4, **body})
    assert status == 400, resp
    assert needle in resp["error"]["message"], resp
    assert server.metrics()["minfer_requests_total"] == before
