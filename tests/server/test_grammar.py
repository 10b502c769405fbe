"""Stage 17 tests: constrained output through src/grammar — OpenAI's response_format
(json_object, json_schema) via the openai client, llama.cpp's `grammar` (GBNF) and
`json_schema` fields; the output always parses / matches, streaming or not; bad
grammars and unsupported schemas are 400s before a slot is taken."""
import json

import pytest

from conftest import needs_model

openai = pytest.importorskip("openai")

CAT = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                        "age": {"type": "integer", "minimum": 0, "maximum": 30}},
       "required": ["name", "age"], "additionalProperties": False}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@needs_model
@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_response_format(server, stream):
    kw = dict(model="m", messages=[{"role": "user", "content": "Describe a cat as JSON."}],
              max_tokens=80, seed=3, temperature=0.7,
              response_format={"type": "json_schema",
                               "json_schema": {"name": "cat", "schema": CAT, "strict": True}})
    c = client(server)
    if stream:
        text = "".join(ch.choices[0].delta.content or "" for ch in
                       c.chat.completions.create(stream=True, **kw) if ch.choices)
    else:
        r = c.chat.completions.create(**kw)
        assert r.choices[0].finish_reason == "stop"
        text = r.choices[0].message.content
    obj = json.loads(text)
    assert set(obj) == {"name", "age"}
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 12
    assert isinstance(obj["age"], int) and 0 <= obj["age"] <= 30


@needs_model
def test_json_object_response_format(server):
    r = client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Some JSON please."}], max_tokens=120,
        temperature=0, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # cut by max_tokens: still a prefix of an object
        assert r.choices[0].message.content.lstrip().startswith("{")


@needs_model
def test_gbnf_grammar_field(server):
    for seed in range(4):
        st, body = server.post("/v1/completions", {
            "prompt": "Is the sky blue? Answer:", "max_tokens": 8, "seed": seed,
            "temperature": 1.0, "grammar": 'root ::= " yes" | " no"'})
        assert st == 200
        assert body["choices"][0]["text"] in (" yes", " no")
        assert body["choices"][0]["finish_reason"] == "stop"


@needs_model
@pytest.mark.parametrize("body", [
    {"grammar": "root ::= ("},
    {"grammar": 42},
    {"grammar": "root ::= other"},
    {"json_schema": {"type": "object", "patternProperties": {"a": {}}}},
    {"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}},
    {"response_format": {"type": "yaml"}},
])
def test_bad_constraints_are_400(server, body):
    st, err = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2, **body})
    assert st == 400 and err["error"]["type"] == "invalid_request_error", err
    assert server.healthy()
