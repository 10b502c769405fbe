"""Every command line that README.md and docs/USAGE.md quote in a code block runs as
written and succeeds.

- A block of commands runs verbatim in bash, in document order (one bash per document,
  so `M=...` carries to later lines), with `minfer` the built binary. `minfer serve ...`
  starts the server in the background and returns once its /health answers (as a user
  waits before the next command; a `&` in the text is then harmless); the next
  `minfer serve` stops the previous one. curl fails on an HTTP error
  (`--fail-with-body` where the line sets no `-f` itself), so a 4xx/5xx answer fails the test. A Python block (one that
  starts with `from`/`import`) runs with python3 against the running server.
- A block that names the checkout's paths (scripts/, bench/, build/) runs in the
  checkout, the others in a temporary folder holding the files they name (chat.json).
- Everything runs in its own network namespace (`unshare -n`, loopback up), so the
  quoted port 8080 is free and nothing leaks to the machine, and with HOME a temporary
  folder whose ~/.cache/minfer links the real cache (models, text, the routers' venv)
  — except the files the quoted commands create (the converted embedding model), so a
  command that refuses to overwrite its output still runs as written.
- A synopsis (a block naming placeholders such as MODEL, FILE or `[-flag]`) cannot run;
  each of its `minfer SUBCOMMAND` lines is checked instead: every flag it shows is one
  that `minfer SUBCOMMAND --help` lists.
- Fenced blocks without a language or marked `text` are sample output or pseudo-code,
  not commands.
- `bash scripts/test.sh` is the CI itself (this test runs inside it) and is not rerun;
  `bash scripts/run.sh` runs (it builds the release `minfer` target: minutes on a cold
  ccache, so this test carries the label `long`).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

BIN = os.path.abspath(os.environ.get("MINFER_BIN", "build/apps/minfer/minfer"))
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/USAGE.md"]
# Files the quoted commands create in the model cache: not linked into the test's cache.
CREATED = {"all-MiniLM-L6-v2-f32.gguf"}
# The CI itself: it runs this test.
NOT_RERUN = {"bash scripts/test.sh"}
PLACEHOLDER = re.compile(
    r"\b(MODEL|PROMPT|TEXT|FILE|IN|OUT|BASE|HF_DIR|FIRST_PART|OUT_PREFIX|TYPE|KEY|NAME|SEP)\b|\[-")
IN_CHECKOUT = re.compile(r"(^|\s)(scripts|bench|build)/")
# stdin of every quoted command (the conversation mode reads its turns from it).
STDIN = "Hello there!\n/exit\n"
# chat.json, the messages file README's `minfer template` line names.
CHAT_JSON = '[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]'


def doc_blocks(text):
    """(line, kind, body) of each code block: kind 'fence:LANG' or 'indent'."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            lang, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((start + 1, "fence:" + lang, "\n".join(body)))
        elif line.startswith("    ") and (i == 0 or lines[i - 1].strip() == ""):
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or (
                    lines[i].strip() == "" and i + 1 < len(lines) and lines[i + 1].startswith("    "))):
                body.append(lines[i][4:])
                i += 1
            out.append((start + 1, "indent", "\n".join(body)))
            continue
        i += 1
    return out


def split_python(body):
    """An indented block may hold shell lines then, after a blank line, a Python part."""
    parts = re.split(r"\n\s*\n", body)
    return [("python" if re.match(r"(from|import) ", p) else "sh", p) for p in parts if p.strip()]


def classify(doc):
    runnable, synopses = [], []
    for line, kind, body in doc_blocks((ROOT / doc).read_text()):
        if kind.startswith("fence:"):
            lang = kind[len("fence:"):]
            if lang in ("", "text", "console"):
                continue  # sample output, pseudo-code
            assert lang in ("sh", "bash"), f"{doc}:{line}: a ```{lang} block this test cannot run"
        for lang, part in split_python(body):
            where = f"{doc}:{line}"
            if lang == "sh" and PLACEHOLDER.search(part):
                synopses.append((where, part))
            elif part.strip() not in NOT_RERUN:
                runnable.append((where, lang, part))
    return runnable, synopses


STARTS_SERVER = re.compile(r"^\s*minfer serve .*&\s*$", re.M)


def script_for(doc, runnable, work):
    pre = f"""
set -eE -o pipefail
trap 'echo "FAILED ({doc}): $BASH_COMMAND" >&2' ERR
WORK={work}
# Alive and not a zombie: a server started by a backgrounded line (`minfer serve ... &`)
# is orphaned when that subshell ends, and its reaper may not reap it at once.
_alive() {{ [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) [ZX] ' "/proc/$1/stat"; }}
_stop() {{
  if [ -f "$WORK/serve.pid" ]; then
    local p; p=$(cat "$WORK/serve.pid"); rm -f "$WORK/serve.pid"
    kill "$p" 2>/dev/null || true
    while _alive "$p"; do sleep 0.05; done
  fi
}}
_serve() {{
  _stop
  "$MINFER_BIN" "$@" >>"$WORK/serve.out" 2>>"$WORK/serve.err" &
  echo $! > "$WORK/serve.pid"
  for _ in $(seq 1200); do
    command curl -sf http://127.0.0.1:8080/health >/dev/null && return 0
    _alive "$(cat "$WORK/serve.pid")" || {{ echo "server exited" >&2; return 1; }}
    sleep 0.1
  done
  echo "server not ready after 120 s" >&2; return 1
}}
minfer() {{
  if [ "${{1:-}}" = serve ]; then _serve "$@"; else "$MINFER_BIN" "$@" < "$WORK/stdin.txt"; fi
}}
# curl fails on an HTTP error unless the line already chose how (-f, --fail...).
curl() {{
  local a
  for a in "$@"; do case "$a" in --fail*|-[!-]*f*) command curl "$@"; return;; esac; done
  command curl --fail-with-body "$@"
}}
trap _stop EXIT
"""
    parts = [pre]
    for where, lang, body in runnable:
        parts.append(f"echo '### {where}' >&2")
        # A block naming the checkout's own paths runs in the checkout, the rest in a
        # folder of its own (where chat.json is).
        parts.append(f"cd {ROOT if IN_CHECKOUT.search(body) else work}")
        # A block that starts a server in the background: the one before it is stopped
        # here, in the script's own shell — stopped from the backgrounded line it could
        # still answer the block's next line while it drains.
        if STARTS_SERVER.search(body):
            parts.append("_stop")
        if lang == "python":
            parts.append(f"python3 - <<'MINFER_DOC_PY'\n{body}\nMINFER_DOC_PY")
        else:
            parts.append(body)
        parts.append("echo")  # a block's output may not end with a newline
    return "\n".join(parts) + "\n"


def fake_home(home):
    """The user's cache, set up as scripts/setup.sh leaves it (the models, the text, the
    routers' venv: setup.sh, which scripts/run.sh runs first, then has nothing to fetch —
    offline in the namespace it would retry PyPI for minutes), except the files the
    quoted commands create."""
    cache = home / ".cache" / "minfer"
    models = cache / "models"
    models.mkdir(parents=True)
    for entry in CACHE.iterdir():
        if entry.name != "models":
            (cache / entry.name).symlink_to(entry.resolve())
    for entry in (CACHE / "models").iterdir():
        if entry.name not in CREATED:
            (models / entry.name).symlink_to(entry.resolve())


def run_doc(doc, tmp_path):
    runnable, _ = classify(doc)
    assert runnable, f"{doc}: no runnable block found (the extraction is broken)"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    fake_home(home)
    (work / "stdin.txt").write_text(STDIN)
    (work / "chat.json").write_text(CHAT_JSON)
    script = work / "doc.sh"
    script.write_text(script_for(doc, runnable, work))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINFER_")}
    ccache_dir = subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True,
                                text=True).stdout.strip() if shutil.which("ccache") else ""
    env.update(HOME=str(home), MINFER_BIN=BIN,
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    if ccache_dir:
        env["CCACHE_DIR"] = ccache_dir
    cmd = ["unshare", "-n", "bash", "-c", f"ip link set lo up && exec bash {script}"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    serve_err = (work / "serve.err").read_text(errors="replace") if (work / "serve.err").exists() else ""
    assert r.returncode == 0, (f"{doc}: a quoted command failed (rc {r.returncode})\n"
                               f"--- stderr (tail)\n{r.stderr[-6000:]}\n--- stdout (tail)\n"
                               f"{r.stdout[-3000:]}\n--- server log (tail)\n{serve_err[-3000:]}")
    return r


def can_unshare():
    return shutil.which("unshare") and subprocess.run(
        ["unshare", "-n", "true"], capture_output=True).returncode == 0


needs_netns = pytest.mark.skipif(not can_unshare(), reason="needs root for `unshare -n`")
needs_models = pytest.mark.skipif(
    not (CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()
    or not (CACHE / "models" / "all-MiniLM-L6-v2").is_dir(),
    reason="model cache incomplete (scripts/setup.sh)")


@needs_netns
@needs_models
def test_readme_commands_run_as_written(tmp_path):
    r = run_doc("README.md", tmp_path)
    out = r.stdout
    # What each quoted command prints: the generated text, bench's table, info's JSON,
    # the token ids, the rendered template, a chat completion, the embedding cosines.
    assert re.search(r"\| pp512 \| +[0-9.]+ ± ", out) and re.search(r"\| tg128 \| +[0-9.]+ ± ", out)
    assert "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" in out
    assert '"object":"chat.completion"' in out.replace(" ", "")
    assert "cosine similarity matrix" in out
    assert '"object":"embedding"' in out.replace(" ", "")
    assert "FAILED" not in r.stderr


@needs_netns
@needs_models
def test_usage_commands_run_as_written(tmp_path):
    r = run_doc("docs/USAGE.md", tmp_path)
    out = r.stdout
    assert '"object":"chat.completion"' in out.replace(" ", "")
    assert "data: [DONE]" in out
    assert "FAILED" not in r.stderr


@pytest.mark.parametrize("doc", DOCS)
def test_synopsis_flags_are_in_the_subcommand_help(doc):
    _, synopses = classify(doc)
    helps, checked = {}, 0
    for where, body in synopses:
        for line in body.split("\n"):
            m = re.match(r"minfer (\w+)\b", line.strip())
            if not m:
                continue
            sub = m.group(1)
            if sub not in helps:
                h = subprocess.run([BIN, sub, "--help"], capture_output=True, text=True, timeout=60)
                assert h.returncode == 0, f"{where}: minfer {sub} --help failed"
                helps[sub] = h.stdout + h.stderr
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", line):
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helps[sub]), (
                    f"{where}: `{flag}` is not in `minfer {sub} --help`")
                checked += 1
    if doc == "docs/USAGE.md":
        assert checked >= 20, f"only {checked} synopsis flags found in {doc}"
