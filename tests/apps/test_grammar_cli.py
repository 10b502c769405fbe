"""Stage 18 tests (the command line): constrained output — --grammar, --grammar-file,
--json-schema / -j, --json-schema-file — in single-shot runs and in -cnv, on SmolLM2 at
temperature 1.0 (so the mask, not the model's preference, keeps the output legal), the
outputs checked by Python (re, json, jsonschema); usage errors for two kinds at once,
missing files, malformed grammars and unsupported schemas; the loud "[grammar]" stop
when no token may come next."""
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

# The model runs take ~20 s in the ci pass; under ASan they would take minutes, so there
# only the usage errors run (the grammar code itself is covered under ASan by
# tests/grammar and the fuzz targets).
SANITIZED = os.environ.get("MINFER_SANITIZE", "0").upper() in ("1", "ON", "TRUE")
needs_model = pytest.mark.skipif(
    not MODEL.exists() or SANITIZED,
    reason=f"{MODEL} not present (scripts/setup.sh)" if not MODEL.exists() else
    "model runs are skipped under the sanitizers (the ci pass runs them)")

HOT = ["--temp", "1.0", "--top-k", "0", "--top-p", "1", "-t", "2"]


def minfer(*args, stdin=b"", timeout=300):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, input=stdin, timeout=timeout)


def usage_error(r, *needles):
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert "minfer: error: " in err, err
    for n in needles:
        assert n in err, err
    assert r.stdout == b""


GBNF_DATE = r'''root ::= year "-" month "-" day
year ::= [12] [0-9] [0-9] [0-9]
month ::= "0" [1-9] | "1" [0-2]
day ::= "0" [1-9] | [12] [0-9] | "3" [01]'''
RE_DATE = r"[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@needs_model
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_grammar_output_matches_the_regex_at_temperature_1(seed):
    r = minfer(MODEL, "Give me a date.", *HOT, "-s", seed, "-n", 40, "--grammar", GBNF_DATE)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert re.fullmatch(RE_DATE, out), out
    assert "stop: eog" in r.stderr.decode()  # the grammar ends, so EOG was allowed there


@needs_model
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_output_validates(seed, tmp_path):
    schema_file = tmp_path / "person.json"
    schema_file.write_text(json.dumps(PERSON))
    for flag, value in (("-j", json.dumps(PERSON)), ("--json-schema-file", schema_file)):
        r = minfer(MODEL, "Describe a person as JSON.", *HOT, "-s", seed, "-n", 120, flag, value)
        assert r.returncode == 0, r.stderr.decode()
        err = r.stderr.decode()
        if "stop: n_predict" in err:
            continue  # cut by -n inside the document: only prefixes are promised
        doc = json.loads(r.stdout.decode())
        jsonschema.validate(doc, PERSON)


@needs_model
def test_grammar_file_is_the_same_as_the_inline_grammar(tmp_path):
    g = tmp_path / "date.gbnf"
    g.write_text(GBNF_DATE + "\n")
    a = minfer(MODEL, "Give me a date.", *HOT, "-s", 7, "-n", 40, "--grammar", GBNF_DATE)
    b = minfer(MODEL, "Give me a date.", *HOT, "-s", 7, "-n", 40, "--grammar-file", g)
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout and re.fullmatch(RE_DATE, a.stdout.decode())


@needs_model
def test_no_allowed_token_stops_loudly_never_an_arbitrary_token():
    # The grammar is complete after "yes"; --ignore-eos bans end-of-generation: nothing may
    # come next, so the run must stop with a [grammar] error, not sample something.
    r = minfer(MODEL, "Say yes.", *HOT, "-n", 20, "--ignore-eos", "--grammar", 'root ::= "yes"')
    assert r.returncode == 1, r.stderr.decode()
    err = r.stderr.decode()
    assert "minfer: error: [grammar] no token is allowed after \"yes\"" in err, err
    assert r.stdout == b"yes"


@pytest.mark.parametrize("args,needles", [
    (["--grammar", 'root ::= "a"', "--grammar-file", "x.gbnf"], ["--grammar and --grammar-file"]),
    (["-j", "{}", "--grammar", 'root ::= "a"'], ["--json-schema and --grammar"]),
    (["--json-schema-file", "a.json", "--json-schema", "{}"],
     ["--json-schema-file and --json-schema"]),
    (["--grammar-file", "/nonexistent/g.gbnf"], ["--grammar-file", "/nonexistent/g.gbnf"]),
    (["--json-schema-file", "/nonexistent/s.json"], ["--json-schema-file"]),
    (["--grammar", "root ::= other"], ["--grammar: 1:", "undefined rule 'other'"]),
    (["--grammar", 'root ::= ("a"'], ["--grammar: 1:"]),
    (["--grammar", ""], ["--grammar:"]),
    (["-j", '{"type": "object", "not": {}}'], ["--json-schema:", "'not'"]),
    (["-j", "{not json"], ["--json-schema:"]),
])
def test_constraint_usage_errors_before_the_model_loads(args, needles):
    # A model path that does not exist: the error must come from the grammar flags first.
    r = minfer("/nonexistent/model.gguf", "hi", *args)
    usage_error(r, *needles)
    assert "Loading model" not in r.stderr.decode()


def test_bad_grammar_file_content_names_file_and_position(tmp_path):
    g = tmp_path / "bad.gbnf"
    g.write_text('root ::= "a"\nx ::= [a-\n')
    r = minfer("/nonexistent/model.gguf", "hi", "--grammar-file", g)
    usage_error(r, f"--grammar-file '{g}': 2:")


def test_help_lists_the_constraint_flags():
    out = minfer("--help").stdout.decode()
    for f in ("--grammar GBNF", "--grammar-file PATH", "-j, --json-schema JSON",
              "--json-schema-file PATH"):
        assert f in out, f


@needs_model
def test_conversation_constrains_every_reply_from_its_start():
    # Two turns through a pipe: each reply on its own must match the grammar (the
    # constraint is reset per reply, so the second is not a continuation of the first).
    r = minfer(MODEL, "-cnv", *HOT, "-s", 5, "-n", 40, "--grammar", GBNF_DATE,
               stdin=b"Give me a date.\nAnother date, please.\n")
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 2, lines
    for line in lines:
        assert re.fullmatch(RE_DATE, line), lines
    assert "conversation ended after 2 turn(s)" in r.stderr.decode()


@needs_model
def test_conversation_grammar_error_is_loud_and_fails_a_piped_run():
    r = minfer(MODEL, "-cnv", *HOT, "-n", 20, "--ignore-eos", "--grammar", 'root ::= "ok"',
               stdin=b"Say ok.\n")
    assert r.returncode == 1, r.stderr.decode()
    assert "[grammar] no token is allowed after \"ok\"" in r.stderr.decode()
