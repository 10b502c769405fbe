#!/usr/bin/env python3
"""Expected chat-template renders for tests/chat_template, produced by Python jinja2
set up exactly as transformers' apply_chat_template sets it up (the oracle).

Sources: every tests/data/templates/*.jinja, the chat_template of every
tests/data/tokenizers/*/tokenizer_config.json, and the template embedded in
the SmolLM2 GGUF of the model cache (key tokenizer.chat_template, read with `gguf`).
Writes one JSON file per template to tests/data/chat_template/ holding the template
source (so the C++ test is hermetic), its BOS/EOS texts and every case with either
the expected text or the error jinja2 raised.

Regenerate (see tests/data/chat_template/README.md):
    python3 tests/chat_template/make_cases.py
"""
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.environ.get("MINFER_TESTDATA_DIR", os.path.join(ROOT, "tests", "data"))
CACHE = os.environ.get("MINFER_CACHE", os.path.expanduser("~/.cache/minfer"))
OUT = os.path.join(ROOT, "tests", "data", "chat_template")

# strftime_now is pinned so renders are reproducible; the C++ test pins the same date.
FIXED_NOW = datetime.datetime(2025, 3, 7, 14, 5, 9)


def make_env():
    # transformers/utils/chat_template_utils.py: _compile_jinja_template
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


SYSTEM = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
U1 = {"role": "user", "content": "Hello! What's 2+2?"}
A1 = {"role": "assistant", "content": "2+2 = 4."}
U2 = {"role": "user", "content": "  And in French, \"s'il vous plaît\"?  \n"}
A2 = {"role": "assistant", "content": "<think>\nThe user wants French.\n</think>\n\nQuatre — « 4 »."}
U3 = {"role": "user", "content": "Thanks 🙂\nBye.\tTab and {{ braces }} {% stay %} literal."}

CONVERSATIONS = {
    "single": [U1],
    "system_single": [SYSTEM, U1],
    "multi": [U1, A1, U2, A2, U3],
    "system_multi": [SYSTEM, U1, A1, U2, A2, U3],
    "ends_assistant": [U1, A1],
    "system_ends_assistant": [SYSTEM, U1, A1, U2, A2],
    # Not alternating: templates that insist on user/assistant turns must raise.
    "double_user": [U1, U2],
}

# Tool use: a function schema in `tools` and one call/result round trip. Exercises
# tojson, dictsort, macros and namespaces far more than plain chat does.
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
        "days": {"type": "integer", "description": "Forecast days"}},
        "required": ["city"]}}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
          "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}
TOOL_CONVERSATIONS = {
    "tools_single": [U1],
    "tools_system_roundtrip": [SYSTEM, U1, CALL, RESULT],
    "tools_roundtrip_answer": [U1, CALL, RESULT, {"role": "assistant", "content": "21.5 °C and clear."}, U3],
}


def token_text(tok):
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def collect_templates():
    out = []
    for path in sorted(glob.glob(os.path.join(TESTDATA, "templates", "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            src = f.read()
        name = os.path.splitext(os.path.basename(path))[0]
        out.append((name, src, "<s>", "</s>"))
    for path in sorted(glob.glob(os.path.join(TESTDATA, "tokenizers", "*", "tokenizer_config.json"))):
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        src = cfg.get("chat_template")
        if not src:
            continue
        if isinstance(src, list):  # named templates: keep the default one
            src = next(t["template"] for t in src if t.get("name") == "default")
        name = "tokenizer-" + os.path.basename(os.path.dirname(path))
        out.append((name, src, token_text(cfg.get("bos_token")), token_text(cfg.get("eos_token"))))
    gguf_path = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(gguf_path):
        import gguf

        reader = gguf.GGUFReader(gguf_path)

        def meta_str(key):
            field = reader.fields.get(key)
            if field is None:
                return None
            return bytes(field.parts[field.data[0]]).decode("utf-8")

        def token(key):
            field = reader.fields.get(key)
            if field is None:
                return None
            tid = int(field.parts[field.data[0]][0])
            tokens = reader.fields["tokenizer.ggml.tokens"]
            return bytes(tokens.parts[tokens.data[tid]]).decode("utf-8")

        out.append(("gguf-SmolLM2-135M-Instruct", meta_str("tokenizer.chat_template"),
                    token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")))
    else:
        print(f"warning: {gguf_path} missing; its template is not regenerated", file=sys.stderr)
    return out


def main():
    env = make_env()
    os.makedirs(OUT, exist_ok=True)
    for name, src, bos, eos in collect_templates():
        tmpl = env.from_string(src)
        cases = []
        convs = [(n, m, None) for n, m in CONVERSATIONS.items()]
        convs += [(n, m, TOOLS) for n, m in TOOL_CONVERSATIONS.items()]
        # enable_thinking=False: the switch Qwen3 / SmolLM3 / DeepSeek templates read.
        convs += [("no_thinking_" + n, CONVERSATIONS[n], None) for n in ("system_single", "multi")]
        for conv_name, messages, tools in convs:
            for agp in (False, True):
                ctx = {"messages": messages, "add_generation_prompt": agp}
                if tools is not None:
                    ctx["tools"] = tools
                if conv_name.startswith("no_thinking_"):
                    ctx["enable_thinking"] = False
                if bos is not None:
                    ctx["bos_token"] = bos
                if eos is not None:
                    ctx["eos_token"] = eos
                case = {"name": f"{conv_name}/agp={str(agp).lower()}", "context": ctx}
                try:
                    case["expected"] = tmpl.render(**ctx)
                except Exception as e:  # the C++ side must fail too
                    case["error"] = str(e)
                    case["error_type"] = type(e).__name__
                cases.append(case)
        doc = {"name": name, "source": src, "now": FIXED_NOW.isoformat(), "cases": cases}
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum(1 for c in cases if "error" in c)
        print(f"{name}: {len(cases)} cases ({n_err} raise)")


if __name__ == "__main__":
    main()
