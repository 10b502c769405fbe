"""Stage 14b/17 oracle test: constrained output checked by independent validators. SmolLM2
at temperature 1.0 (top-k and top-p off, so the mask alone keeps the output legal) with 3
seeds, through one `minfer serve` on loopback with 4 slots:
  * 24 JSON Schemas of the kinds users send (nested objects, arrays with bounds, enums,
    anyOf / oneOf, $ref, formats, patterns, integer ranges, nullable, const, allOf,
    prefixItems, additionalProperties) — every output that finishes within max_tokens
    must validate with the `jsonschema` package (formats checked too);
  * 12 GBNF grammars, each with an equivalent Python regular expression that must
    fully match every finished output.
A finished run is one that ended at end-of-generation (finish_reason stop); a run cut by
max_tokens only promises a prefix and is not judged, but most runs must finish, so the
test cannot pass by cutting everything."""
import json
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from conftest import MODEL, Server

SEEDS = (11, 22, 33)
MAX_TOKENS = 96

DEFS_ADDR = {"$defs": {"address": {"type": "object",
                                   "properties": {"street": {"type": "string", "maxLength": 24},
                                                  "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                   "required": ["street", "zip"], "additionalProperties": False}}}

SCHEMAS = {
    "flat_person": {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False},
    "nested_order": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99999},
        "customer": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 16},
            "vip": {"type": "boolean"}}, "required": ["name", "vip"], "additionalProperties": False}},
        "required": ["id", "customer"], "additionalProperties": False},
    "array_bounds": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                 "minItems": 1, "maxItems": 3}},
        "required": ["tags"], "additionalProperties": False},
    "array_of_ints": {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50},
                      "minItems": 2, "maxItems": 4},
    "enum_color": {"type": "object", "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "shade": {"enum": [1, 2, 3, None]}}, "required": ["color", "shade"],
        "additionalProperties": False},
    "anyof_id": {"type": "object", "properties": {
        "id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 999},
                         {"type": "string", "pattern": "^[A-Z]{3}$"}]}},
        "required": ["id"], "additionalProperties": False},
    "oneof_shape": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"},
                                          "r": {"type": "integer", "minimum": 1, "maximum": 9}},
         "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "square"},
                                          "side": {"type": "integer", "minimum": 1, "maximum": 9}},
         "required": ["kind", "side"], "additionalProperties": False}]},
    "ref_defs": {**DEFS_ADDR, "type": "object", "properties": {
        "home": {"$ref": "#/$defs/address"}}, "required": ["home"], "additionalProperties": False},
    "ref_definitions_array": {"definitions": {"pt": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 9},
        "y": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}},
        "type": "array", "items": {"$ref": "#/definitions/pt"}, "minItems": 1, "maxItems": 3},
    "format_date": {"type": "object", "properties": {"born": {"type": "string", "format": "date"}},
                    "required": ["born"], "additionalProperties": False},
    "format_time": {"type": "object", "properties": {"at": {"type": "string", "format": "time"}},
                    "required": ["at"], "additionalProperties": False},
    "format_datetime": {"type": "object", "properties": {
        "ts": {"type": "string", "format": "date-time"}}, "required": ["ts"],
        "additionalProperties": False},
    "format_uuid": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}},
                    "required": ["id"], "additionalProperties": False},
    "pattern_phone": {"type": "object", "properties": {
        "phone": {"type": "string", "pattern": "^\\+?[0-9]{2,3}-[0-9]{3}-[0-9]{4}$"}},
        "required": ["phone"], "additionalProperties": False},
    "pattern_alt": {"type": "string", "pattern": "^(cat|dog|bird)s?$"},
    "integer_range_negative": {"type": "object", "properties": {
        "t": {"type": "integer", "minimum": -40, "maximum": 45},
        "n": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}},
        "required": ["t", "n"], "additionalProperties": False},
    "nullable_fields": {"type": "object", "properties": {
        "nick": {"type": ["string", "null"], "maxLength": 10},
        "score": {"type": ["integer", "null"], "minimum": 0, "maximum": 10}},
        "required": ["nick", "score"], "additionalProperties": False},
    "optional_props": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 9},
        "b": {"type": "string", "maxLength": 6},
        "c": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False},
    "const_and_number": {"type": "object", "properties": {
        "version": {"const": 2}, "ratio": {"type": "number"}},
        "required": ["version", "ratio"], "additionalProperties": False},
    "allof_merge": {"allOf": [
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}},
         "required": ["name"]},
        {"type": "object", "properties": {"level": {"type": "integer", "minimum": 1, "maximum": 5}},
         "required": ["level"]}]},
    "prefix_items_tuple": {"type": "array", "prefixItems": [
        {"type": "string", "maxLength": 8}, {"type": "integer", "minimum": 0, "maximum": 99},
        {"type": "boolean"}], "items": False},
    "additional_typed": {"type": "object", "properties": {"id": {"type": "integer"}},
                         "required": ["id"],
                         "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}},
    "deep_nesting": {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "object", "properties": {
            "c": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
            "required": ["c"], "additionalProperties": False}},
        "required": ["b"], "additionalProperties": False}},
        "required": ["a"], "additionalProperties": False},
    "recursive_tree": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v", "kids"], "additionalProperties": False}},
        "$ref": "#/$defs/node"},
}

# (GBNF, an equivalent Python regex): the regex is written independently of the grammar.
GRAMMARS = {
    "yes_no": ('root ::= "yes" | "no"', r"yes|no"),
    "date": ('root ::= [12] [0-9]{3} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])',
             r"[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    "ipv4": ('root ::= octet "." octet "." octet "." octet\n'
             'octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9]',
             r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"),
    "word_list": ('root ::= word ("," " "? word){0,4}\nword ::= [a-z]{1,8}',
                  r"[a-z]{1,8}(, ?[a-z]{1,8}){0,4}"),
    "arith": ('root ::= num (ws op ws num){1,3}\nnum ::= "-"? [1-9] [0-9]{0,2} | "0"\n'
              'op ::= [-+*/]\nws ::= " "?',
              r"(-?[1-9][0-9]{0,2}|0)( ?[-+*/] ?(-?[1-9][0-9]{0,2}|0)){1,3}"),
    "hex_color": ('root ::= "#" [0-9a-fA-F]{6}', r"#[0-9a-fA-F]{6}"),
    "email_like": ('root ::= [a-z] [a-z0-9.]{0,10} "@" [a-z]{2,8} "." ("com" | "org" | "net")',
                   r"[a-z][a-z0-9.]{0,10}@[a-z]{2,8}\.(com|org|net)"),
    "negated_class": ('root ::= "\\"" [^"\\\\\\n]{1,20} "\\""', r'"[^"\\\n]{1,20}"'),
    "nested_parens": ('root ::= expr\nexpr ::= "(" expr ")" | "x" | "[" "y"? "]"',
                      r"\(*(x|\[y?\])\)*"),  # balanced checked below
    "time_hhmm": ('root ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] (" " ("am" | "pm"))?',
                  r"([01][0-9]|2[0-3]):[0-5][0-9]( (am|pm))?"),
    "unicode_range": ('root ::= [\\u00e0-\\u00ff]{1,5} " " [a-z]{1,5}',
                      r"[\u00e0-\u00ff]{1,5} [a-z]{1,5}"),
    "kv_lines": ('root ::= line{1,3}\nline ::= [a-z]{1,6} "=" [0-9]{1,4} "\\n"',
                 r"([a-z]{1,6}=[0-9]{1,4}\n){1,3}"),
}

PROMPT = "Reply with an example of the requested data: {}."


def balanced(s):
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


@pytest.fixture(scope="module")
def server():
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
    s = Server("--slots", 4, "--n-ctx", 512, "-t", 2)
    yield s
    s.kill()


def run_all(server, jobs):
    def one(job):
        name, seed, extra = job
        status, body = server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": PROMPT.format(name.replace("_", " "))}],
            "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed,
            "max_tokens": MAX_TOKENS, **extra}, timeout=300)
        assert status == 200, (name, body)
        ch = body["choices"][0]
        return name, seed, ch["finish_reason"], ch["message"]["content"]
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, jobs))


def test_json_schema_outputs_validate_with_jsonschema(server):
    assert len(SCHEMAS) >= 20
    jobs = [(n, s, {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": n, "schema": sch, "strict": True}}})
            for n, sch in SCHEMAS.items() for s in SEEDS]
    finished, failures = 0, []
    for name, seed, finish, text in run_all(server, jobs):
        if finish != "stop":
            continue  # cut by max_tokens: only a prefix is promised
        finished += 1
        v = jsonschema.Draft202012Validator(SCHEMAS[name],
                                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            failures.append((name, seed, f"not JSON: {e}", text))
            continue
        errors = [e.message for e in v.iter_errors(doc)]
        if errors:
            failures.append((name, seed, errors, text))
    assert not failures, failures
    assert finished >= 0.75 * len(jobs), f"only {finished} of {len(jobs)} runs finished"


def test_gbnf_outputs_fully_match_an_equivalent_regex(server):
    assert len(GRAMMARS) >= 10
    jobs = [(n, s, {"grammar": g}) for n, (g, _) in GRAMMARS.items() for s in SEEDS]
    finished, failures = 0, []
    for name, seed, finish, text in run_all(server, jobs):
        if finish != "stop":
            continue
        finished += 1
        rx = GRAMMARS[name][1]
        ok = re.fullmatch(rx, text, flags=re.S) is not None
        if name == "nested_parens":
            ok = ok and balanced(text)
        if not ok:
            failures.append((name, seed, text))
    assert not failures, failures
    assert finished >= 0.75 * len(jobs), f"only {finished} of {len(jobs)} runs finished"
