"""Stage 17 tests: Ollama's API on `minfer serve` (loopback, the real SmolLM2 model)
driven by the official `ollama` Python client — greedy chat text equals the OpenAI chat
route's for the same messages (one render, one sampler, the same defaults), the NDJSON
stream concatenates to the whole reply with its final counts, num_predict ends with
done_reason length and eval_count equal to it, a `format` JSON schema's output parses
with its fields, a tool call comes back with its arguments as a dict, a raw generate
equals /v1/completions, the load call, the model routes (tags, show, ps, version), 404
for another model, and bad input as 4xx in Ollama's shape ({"error": "..."}) with the
server healthy after."""
import http.client
import json
import time
import urllib.parse
import urllib.request

import pytest

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

ASK = [{"role": "user", "content": "Tell me about the moon."}]
GREEDY = {"temperature": 0}
WEATHER_TOOL = {"type": "function",
                "function": {"name": "get_weather", "description": "Current weather in a city",
                             "parameters": {"type": "object",
                                            "properties": {"city": {"type": "string",
                                                                    "maxLength": 24}},
                                            "required": ["city"]}}}


def model_id(server):
    status, body = server.request("GET", "/v1/models")
    assert status == 200
    return json.loads(body)["data"][0]["id"]


def client(server):
    return ollama.Client(host=server.url, timeout=120)


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_greedy_chat_equals_the_openai_chat_routes(server):
    m = model_id(server)
    r = client(server).chat(model=m, messages=ASK, options={**GREEDY, "num_predict": 24})
    o = oai(server).chat.completions.create(model=m, max_tokens=24, temperature=0, messages=ASK)
    assert r.message.role == "assistant"
    assert r.message.content == o.choices[0].message.content
    assert r.message.content != ""
    assert r.done is True and r.done_reason == "length"
    assert r.prompt_eval_count == o.usage.prompt_tokens
    assert r.eval_count == o.usage.completion_tokens == 24
    assert r.model == m


def test_default_length_chat_equals_the_openai_default(server):
    # No num_predict / max_tokens on either side: both run to the end of the turn (or the
    # context), so the defaults must agree as well as the sampler.
    m = model_id(server)
    ask = [{"role": "user", "content": "Say hello in one word."}]
    r = client(server).chat(model=m, messages=ask, options=GREEDY)
    o = oai(server).chat.completions.create(model=m, temperature=0, messages=ask)
    assert r.message.content == o.choices[0].message.content
    assert r.done_reason == "stop" and o.choices[0].finish_reason == "stop"
    assert r.eval_count == o.usage.completion_tokens


def test_stream_concatenates_to_the_whole_reply_with_counts(server):
    m = model_id(server)
    c = client(server)
    whole = c.chat(model=m, messages=ASK, options={**GREEDY, "num_predict": 20})
    parts = list(c.chat(model=m, messages=ASK, options={**GREEDY, "num_predict": 20}, stream=True))
    assert len(parts) >= 2
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content
    last = parts[-1]
    assert last.done_reason == "length" and last.eval_count == 20
    assert last.prompt_eval_count == whole.prompt_eval_count
    assert last.total_duration >= last.eval_duration > 0
    assert last.prompt_eval_duration > 0 and last.load_duration == 0


def test_stream_is_ndjson_and_the_default(server):
    body = json.dumps({"model": model_id(server), "messages": ASK,
                       "options": {**GREEDY, "num_predict": 4}}).encode()
    req = urllib.request.Request(server.url + "/api/chat", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.headers["Content-Type"] == "application/x-ndjson"
        lines = [json.loads(x) for x in r.read().decode().splitlines()]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[0]["created_at"].endswith("Z") and lines[0]["message"]["role"] == "assistant"
    assert lines[-1]["eval_count"] == 4 and lines[-1]["done_reason"] == "length"


@pytest.mark.parametrize("n", [1, 7])
def test_num_predict_is_the_eval_count(server, n):
    r = client(server).chat(model=model_id(server), messages=ASK, options={**GREEDY, "num_predict": n})
    assert r.done_reason == "length" and r.eval_count == n


def test_num_ctx_bounds_the_request(server):
    m = model_id(server)
    c = client(server)
    n_prompt = c.chat(model=m, messages=ASK, options={**GREEDY, "num_predict": 1}).prompt_eval_count
    r = c.chat(model=m, messages=ASK, options={**GREEDY, "num_ctx": n_prompt + 6})
    assert r.done_reason == "length"
    # Every position holds a token fed to the model; the last token sampled is not fed,
    # so it takes none: prompt + completion = num_ctx + 1 (as at the server's --n-ctx).
    assert r.prompt_eval_count + r.eval_count == n_prompt + 7, (r.prompt_eval_count, r.eval_count)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model=m, messages=ASK, options={"num_ctx": n_prompt})
    assert e.value.status_code == 400 and "num_ctx" in e.value.error


def test_format_schema_output_parses_with_its_fields(server):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 20},
                             "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client(server).chat(model=model_id(server), format=schema, options={**GREEDY, "num_predict": 60},
                            messages=[{"role": "user", "content": "Describe a person as JSON."}])
    out = json.loads(r.message.content)
    assert set(out) == {"name", "age"}
    assert isinstance(out["name"], str) and isinstance(out["age"], int)


def test_format_json_output_parses(server):
    r = client(server).generate(model=model_id(server), prompt='Repeat this JSON: {"colour": "red"}',
                                format="json", options={**GREEDY, "num_predict": 60})
    assert r.done_reason == "stop", r.response
    assert isinstance(json.loads(r.response), (dict, list))


def test_tool_call_arguments_come_back_as_a_dict(server):
    m = model_id(server)
    ask = [{"role": "user", "content": "What is the weather in Paris? Call get_weather."}]
    r = client(server).chat(model=m, messages=ask, tools=[WEATHER_TOOL],
                            options={**GREEDY, "num_predict": 80})
    assert r.message.tool_calls, r.message.content
    call = r.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert isinstance(call.function.arguments, dict) and isinstance(call.function.arguments["city"], str)
    assert r.done_reason == "stop"
    # The call and its result go back in Ollama's shapes (arguments an object, tool_name).
    history = ask + [{"role": "assistant", "content": "",
                      "tool_calls": [{"function": {"name": "get_weather",
                                                   "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_name": "get_weather", "content": "18 C and sunny"}]
    after = client(server).chat(model=m, messages=history, options={**GREEDY, "num_predict": 8})
    assert after.done and after.eval_count == 8


def test_streamed_tool_call_comes_in_the_last_line(server):
    m = model_id(server)
    ask = [{"role": "user", "content": "What is the weather in Paris? Call get_weather."}]
    whole = client(server).chat(model=m, messages=ask, tools=[WEATHER_TOOL],
                                options={**GREEDY, "num_predict": 80})
    parts = list(client(server).chat(model=m, messages=ask, tools=[WEATHER_TOOL], stream=True,
                                     options={**GREEDY, "num_predict": 80}))
    assert parts[-1].done and parts[-1].message.tool_calls
    assert [c.function.arguments for c in parts[-1].message.tool_calls] == \
        [c.function.arguments for c in whole.message.tool_calls]
    assert all(not p.message.tool_calls for p in parts[:-1])
    assert "".join(p.message.content for p in parts) == whole.message.content


def test_raw_generate_equals_the_completions_route(server):
    m = model_id(server)
    prompt = "The capital of France is"
    g = client(server).generate(model=m, prompt=prompt, raw=True, options={**GREEDY, "num_predict": 16})
    o = oai(server).completions.create(model=m, prompt=prompt, max_tokens=16, temperature=0)
    assert g.response == o.choices[0].text != ""
    assert g.eval_count == 16 and g.prompt_eval_count == o.usage.prompt_tokens
    assert g.context is None  # the token state is not offered (a `context` sent back is refused)


def test_generate_with_system_equals_the_chat_route(server):
    m = model_id(server)
    g = client(server).generate(model=m, prompt="Name a fruit.", system="Answer in one word.",
                                options={**GREEDY, "num_predict": 12})
    o = oai(server).chat.completions.create(
        model=m, max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Name a fruit."}])
    assert g.response == o.choices[0].message.content


def test_stop_option_ends_the_reply(server):
    m = model_id(server)
    c = client(server)
    free = c.chat(model=m, messages=ASK, options={**GREEDY, "num_predict": 24}).message.content
    words = free.split()
    assert len(words) >= 3
    cut = c.chat(model=m, messages=ASK, options={**GREEDY, "num_predict": 24, "stop": [words[2]]})
    assert cut.done_reason == "stop"
    assert cut.message.content == free[:free.index(words[2])]


def test_load_calls_answer_done_with_reason_load(server):
    m = model_id(server)
    g = client(server).generate(model=m)
    assert g.done and g.done_reason == "load" and g.response == ""
    status, body = server.post("/api/chat", {"model": m, "messages": []})
    assert status == 200 and body["done"] and body["done_reason"] == "load"
    assert body["message"] == {"role": "assistant", "content": ""}


def test_model_routes_describe_the_model(server):
    m = model_id(server)
    c = client(server)
    tags = c.list()
    assert [x.model for x in tags.models] == [m]
    entry = tags.models[0]
    assert entry.size == server_model_size()
    assert len(entry.digest) == 16 and int(entry.digest, 16) >= 0
    assert entry.details.format == "gguf" and entry.details.family == "llama"
    assert entry.details.quantization_level == "Q4_1"
    assert entry.details.parameter_size == "135M"
    status, raw = server.request("GET", "/api/tags")
    assert json.loads(raw)["models"][0]["name"] == m

    show = c.show(m + ":latest")
    assert "im_start" in show.template
    assert show.modelinfo["general.architecture"] == "llama"
    assert show.modelinfo["llama.context_length"] == 8192
    assert show.modelinfo["tokenizer.ggml.tokens"] is None  # long arrays are left out
    assert "FROM " in show.modelfile and "temperature 0.8" in show.parameters
    assert show.details.family == "llama"
    status, body = server.post("/api/show", {"name": m})
    assert status == 200 and body["details"]["format"] == "gguf"
    status, body = server.post("/api/show", {"model": m, "verbose": True})
    assert status == 200 and len(body["model_info"]["tokenizer.ggml.tokens"]) == 49152

    ps = c.ps()
    assert [x.model for x in ps.models] == [m]
    assert ps.models[0].context_length == 1024 and ps.models[0].digest == entry.digest

    status, raw = server.request("GET", "/api/version")
    assert status == 200 and json.loads(raw)["version"].count(".") == 2


def server_model_size():
    from conftest import MODEL
    return MODEL.stat().st_size


def test_unknown_model_is_404_in_ollamas_shape(server):
    c = client(server)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="llama3", messages=ASK)
    assert e.value.status_code == 404 and e.value.error == "model 'llama3' not found"
    with pytest.raises(ollama.ResponseError) as e:
        c.show("llama3:8b")
    assert e.value.status_code == 404
    status, body = server.post("/api/generate", {"model": "nope", "prompt": "x"})
    assert status == 404 and body == {"error": "model 'nope' not found"}


BAD = [
    ("/api/chat", {"messages": ASK}, "'model' is required"),
    ("/api/chat", {"model": "M", "messages": "hi"}, "'messages' must be an array"),
    ("/api/chat", {"model": "M", "messages": [{"role": "robot", "content": "x"}]}, "role 'robot'"),
    ("/api/chat", {"model": "M", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]},
     "images"),
    ("/api/chat", {"model": "M", "messages": ASK, "stream": "yes"}, "'stream' must be a boolean"),
    ("/api/chat", {"model": "M", "messages": ASK, "format": "xml"}, "'format' 'xml'"),
    ("/api/chat", {"model": "M", "messages": ASK, "format": {"type": "object", "minProperties": "x"}},
     "schema"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": {"num_ctx": 999999}}, "num_ctx"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": {"temperature": "hot"}}, "'options.temperature' must be a number"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": {"top_p": 7}}, "'options.top_p' must be in"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": {"stop": [1]}}, "'options.stop'"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": {"num_predict": -3}}, "num_predict"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": {"mirostat": 2}}, "mirostat"),
    ("/api/chat", {"model": "M", "messages": ASK, "options": []}, "'options' must be an object"),
    ("/api/chat", {"model": "M", "messages": ASK, "think": "extreme"}, "'think' must be"),
    ("/api/chat", {"model": "M", "messages": ASK, "think": 1}, "'think' must be"),
    ("/api/generate", {"model": "M", "prompt": "x", "think": {"level": "low"}}, "'think' must be"),
    ("/api/chat", {"model": "M", "messages": ASK, "tools": [{"type": "function"}]}, "tools"),
    ("/api/chat", {"model": "M", "messages": [{"role": "assistant", "content": "",
                                               "tool_calls": [{"function": {"name": "f",
                                                                            "arguments": "[1]"}}]}]},
     "arguments must be an object"),
    ("/api/generate", {"model": "M", "prompt": "x", "template": "{{ .Prompt }}"}, "'template'"),
    ("/api/generate", {"model": "M", "prompt": "x", "suffix": "y"}, "'suffix'"),
    ("/api/generate", {"model": "M", "prompt": "x", "context": [1, 2, 3]}, "'context'"),
    ("/api/generate", {"model": "M", "prompt": "x", "images": ["aGk="]}, "images"),
    ("/api/generate", {"model": "M", "prompt": 5}, "'prompt' must be a string"),
    ("/api/generate", {"model": "M", "prompt": "x", "raw": True, "system": "s"}, "'system'"),
    ("/api/show", {}, "'model' is required"),
    ("/api/show", {"model": "M", "verbose": "yes"}, "'verbose' must be a boolean"),
]


@pytest.mark.parametrize("path,body,needle", BAD)
def test_bad_input_is_a_400_in_ollamas_shape(server, path, body, needle):
    if body.get("model") == "M":
        body = {**body, "model": model_id(server)}
    status, out = server.post(path, body)
    assert status == 400, out
    assert list(out) == ["error"] and needle in out["error"], out
    assert server.healthy()


def test_bad_json_and_wrong_method_get_ollamas_shape(server):
    status, raw = server.request("POST", "/api/chat", raw=b"{not json")
    assert status == 400 and "not valid JSON" in json.loads(raw)["error"]
    status, raw = server.request("GET", "/api/chat")
    assert status == 405 and "error" in json.loads(raw)
    status, raw = server.request("GET", "/api/nothing")
    assert status == 404 and json.loads(raw) == {"error": "no such route"}
    assert server.healthy()


def test_a_stream_cut_by_the_drain_ends_with_an_error_line(make_server):
    s = make_server("--slots", 1, "--n-ctx", 1024, "-t", 2)
    host, port = urllib.parse.urlsplit(s.url).netloc.split(":")
    body = {"model": model_id(s), "prompt": "1, 2, 3, 4, 5,", "raw": True,
            "options": {**GREEDY, "num_predict": 900}}
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/api/generate", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    first = json.loads(r.readline())  # a token arrived: the request runs
    assert first["done"] is False
    s.terminate()
    time.sleep(0.3)
    s.terminate()  # the second signal ends what still runs
    lines = [json.loads(x) for x in r.read().decode().splitlines()]
    conn.close()
    assert lines[-1] == {"error": "the server is shutting down"}
    assert all(x.get("done") is False for x in lines[:-1])
    assert s.proc.wait(60) == 0


def test_api_key_applies_to_the_ollama_routes(make_server):
    s = make_server("--api-key", "sekret", "--slots", 1, "--n-ctx", 256, "-t", 2)
    status, raw = s.request("GET", "/api/tags")
    assert status == 401 and "API key" in json.loads(raw)["error"]
    tags = ollama.Client(host=s.url, headers={"Authorization": "Bearer sekret"}).list()
    assert len(tags.models) == 1
