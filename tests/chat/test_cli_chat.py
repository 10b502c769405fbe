"""Stage 16/18 tests (conversation mode): `minfer MODEL --cnv` in a real terminal (tmux)
on SmolLM2 (skipped when the model cache lacks it), greedy for reproducibility. Bars:
what the user sees on screen for 4 turns with /regen and /clear, the per-turn stderr
reports (delta-only prefill counts), Ctrl-C stopping a reply but not the session, the
session file resuming with 0 tokens prefilled, the refusals, and the single-shot
template path (`minfer template`, templated prompts, --no-template)."""
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


# The replies whose facts these tests read ("Paris") are greedy with repeat penalty 1.1:
# at llama.cpp's default of 1.0, SmolLM2-135M answers the capital question without the
# city's name in its first tokens.
FACTS = ("--repeat-penalty", "1.1")


def minfer(*args, stdin=None, env=None):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, input=stdin, timeout=300,
                          env=None if env is None else {**os.environ, **env})


class Term:
    """One minfer process in a detached tmux session: type lines, read the screen."""

    def __init__(self, tmp_path, *args):
        self.name = "minfer-chat-" + uuid.uuid4().hex[:8]
        self.err = tmp_path / "stderr.txt"
        cmd = " ".join([BIN, *map(str, args)]) + f" 2>{self.err}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "60", cmd],
                       check=True)

    def screen(self):
        r = subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", self.name, "-S", "-500"],
                           capture_output=True, text=True)
        return r.stdout

    def stderr(self):
        return self.err.read_text() if self.err.exists() else ""

    def alive(self):
        return subprocess.run(["tmux", "has-session", "-t", self.name],
                              capture_output=True).returncode == 0

    def wait(self, pred, timeout=120, what=""):
        end = time.time() + timeout
        while time.time() < end:
            if pred():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n--- screen ---\n{self.screen()}"
                             f"\n--- stderr ---\n{self.stderr()}")

    def prompts(self):
        return sum(1 for line in self.screen().splitlines() if line.startswith("> "))

    def send(self, text):
        subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", text], check=True)
        subprocess.run(["tmux", "send-keys", "-t", self.name, "Enter"], check=True)

    def key(self, k):
        subprocess.run(["tmux", "send-keys", "-t", self.name, k], check=True)

    def turn(self, text, n_reports):
        """Type a line and wait for the reply: the stderr report count and a new prompt."""
        before = self.prompts()
        self.send(text)
        self.wait(lambda: self.stderr().count("[turn ") >= n_reports and self.prompts() > before,
                  what=f"the reply to {text!r}")

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def reports(err):
    return re.findall(r"\[turn (\d+)( regen \d+)?\] prefill (\d+) tokens \((\d+) reused\)", err)


def generated(err):
    """Per turn report: (tokens generated, why it ended)."""
    return [(int(n), why) for n, why in
            re.findall(r"\[turn \d+[^\]]*\] prefill .* generated (\d+) tokens in [^,]*, (.+)", err)]


def reply_after(screen, question):
    """The reply printed after the last `> question` line, up to the next prompt."""
    out = []
    for line in screen.split("> " + question)[-1].splitlines()[1:]:
        if line.startswith(">"):
            break
        out.append(line)
    return "\n".join(out).strip()


@needs_model
@needs_tmux
def test_four_turns_with_regen_and_clear_in_a_real_terminal(tmp_path):
    session = tmp_path / "chat.session"
    t = Term(tmp_path, MODEL, "--cnv", "--temp", "0", *FACTS, "-n", "96", "-t", "2", "--session",
             session)
    try:
        t.wait(lambda: t.prompts() >= 1, what="the first prompt")
        # The exact wording of a greedy reply depends on the kernels' rounding (ISA); the
        # bars are the facts in it and that replays reproduce it byte for byte.
        t.turn("What is the capital of France?", 1)
        first_reply = reply_after(t.screen(), "What is the capital of France?")
        assert "Paris" in first_reply
        t.turn("And of Germany?", 2)
        second_reply = reply_after(t.screen(), "And of Germany?")
        assert "Berlin" in second_reply
        # /regen at --temp 0 redraws the same reply; the screen shows it a second time.
        t.turn("/regen", 3)
        assert t.screen().count(second_reply) == 2
        before = t.prompts()
        t.send("/clear")
        t.wait(lambda: "[history cleared]" in t.stderr() and t.prompts() > before, what="/clear")
        t.turn("What is the capital of France?", 4)
        assert t.screen().count(first_reply) == 2
        before = t.prompts()
        t.send("/help")
        t.wait(lambda: "/regen [N]" in t.stderr() and t.prompts() > before, what="/help")
        # Command answers go to stderr: the screen (stdout) holds only replies and input.
        assert "[history cleared]" not in t.screen() and "/regen [N]" not in t.screen()
        t.send("/exit")
        t.wait(lambda: not t.alive(), what="exit")
    finally:
        t.close()
    err = t.stderr()
    r = reports(err)
    assert [x[0] for x in r] == ["1", "2", "2", "1"], err
    assert r[2][1] == " regen 1"
    first, second, regen, after_clear = [(int(x[2]), int(x[3])) for x in r]
    # Turn 2 prefills only its delta: everything turn 1 left in the KV (prompt, reply
    # and its <|im_end|>) is reused, up to where the template's re-render of the reply
    # tokenizes differently from the sampled tokens (a greedy reply need not be in its
    # canonical tokenization: those tokens are rewound and re-prefilled, and reported);
    # /regen replays exactly that delta; after /clear the first turn is prefilled whole
    # again, as at the start.
    assert first == (first[0], 0) and first[0] > 30
    n_reply, why = generated(err)[0]
    assert why == "end of turn", err
    rewound = [int(n) for n in re.findall(r"\[turn 2\] the template render differs from the KV "
                                          r"after token \d+: (\d+) token\(s\) rewound", err)]
    assert len(rewound) <= 1 and sum(rewound) < n_reply, err
    # the reply and its <|im_end|>, less what was rewound
    assert second[1] + sum(rewound) == first[0] + n_reply + 1, err
    assert second[0] - sum(rewound) < 20  # the new question, wrapped
    assert regen == second
    assert after_clear == first
    assert "[session] saved 2 message(s)" in err
    # The exit line counts every turn of the run, across /clear, and the regens.
    assert "conversation ended after 3 turn(s) and 1 regen(s)" in err


@needs_model
@needs_tmux
def test_ctrl_c_stops_the_reply_not_the_session(tmp_path):
    t = Term(tmp_path, MODEL, "--cnv", "--temp", "0", "-n", "400", "-t", "2")
    try:
        t.wait(lambda: t.prompts() >= 1, what="the first prompt")
        before = t.prompts()
        t.send("Write a very long story about a dragon who learns to cook.")
        t.wait(lambda: len(t.screen().split("cook.")[-1].strip()) > 40, what="the reply to start")
        t.key("C-c")
        t.wait(lambda: "[turn 1]" in t.stderr() and t.prompts() > before, what="the stopped reply")
        assert "interrupted" in t.stderr()
        assert "[reply stopped]" in t.stderr()
        assert t.alive()
        t.turn("What is the capital of France?", 2)
        assert "Paris" in t.screen().split("France?")[-1]
        t.key("C-d")
        t.wait(lambda: not t.alive(), what="exit on Ctrl-D")
    finally:
        t.close()
    r = reports(t.stderr())
    assert [x[0] for x in r] == ["1", "2"]


@needs_model
def test_session_resumes_with_zero_prefill_and_continues_like_an_unbroken_session(tmp_path):
    session = tmp_path / "s.session"
    lines = ["What is the capital of France?", "And of Germany?", "And of Italy?"]
    whole = minfer(MODEL, "--cnv", "--temp", "0", "-n", "32", "-t", "2",
                   stdin="\n".join(lines).encode())
    assert whole.returncode == 0, whole.stderr.decode()
    a = minfer(MODEL, "--cnv", "--temp", "0", "-n", "32", "-t", "2", "--session", session,
               stdin="\n".join(lines[:2]).encode())
    assert a.returncode == 0, a.stderr.decode()
    b = minfer(MODEL, "--cnv", "--temp", "0", "-n", "32", "-t", "2", "--session", session,
               stdin=lines[2].encode())
    assert b.returncode == 0, b.stderr.decode()
    err = b.stderr.decode()
    assert re.search(r"\[session\] resumed 4 message\(s\) and \d+ KV row\(s\) from .* — 0 tokens prefilled", err)
    # Same bytes on screen as the session that never stopped, and the same delta.
    assert whole.stdout.decode() == a.stdout.decode() + b.stdout.decode()
    assert reports(err)[0][0] == "3"
    assert reports(err)[0][2:] == reports(whole.stderr.decode())[2][2:]
    # A corrupt file is refused, loudly.
    data = bytearray(session.read_bytes())
    data[100] ^= 0xFF
    session.write_bytes(bytes(data))
    c = minfer(MODEL, "--cnv", "--session", session, "-t", "2", stdin=b"")
    assert c.returncode == 1
    assert "checksum" in c.stderr.decode()


@needs_model
def test_session_records_its_k_and_v_cache_types(tmp_path):
    # K q8_0 + V f16 and K f16 + V q8_0 store rows of the same size on this model (head
    # size 64: 68 + 128 bytes per head either way): only the recorded types tell them apart.
    session = tmp_path / "s.session"
    a = minfer(MODEL, "--cnv", "--temp", "0", "-n", "8", "-t", "2", "-ctk", "q8_0", "-ctv", "f16",
               "--session", session, stdin=b"What is the capital of France?")
    assert a.returncode == 0, a.stderr.decode()
    saved = session.read_bytes()
    swapped = minfer(MODEL, "--cnv", "-t", "2", "-ctk", "f16", "-ctv", "q8_0", "--session", session,
                     stdin=b"")
    assert swapped.returncode == 1
    assert ("holds a q8_0/f16 KV cache (K q8_0, V f16), this run's is f16/q8_0 (K f16, V q8_0)"
            in swapped.stderr.decode()), swapped.stderr.decode()
    assert session.read_bytes() == saved  # the refused file is left as it was
    same = minfer(MODEL, "--cnv", "--temp", "0", "-n", "8", "-t", "2", "-ctk", "q8_0", "-ctv", "f16",
                  "--session", session, stdin=b"And of Germany?")
    assert same.returncode == 0, same.stderr.decode()
    assert re.search(r"\[session\] resumed 2 message\(s\) and \d+ KV row\(s\) .* 0 tokens prefilled",
                     same.stderr.decode())


@needs_model
def test_session_with_rotated_kv_rows_is_refused_by_a_run_that_does_not_rotate(tmp_path):
    # A q8_0 cache's rows are rotated by default (llama.cpp's Walsh-Hadamard rotation, head
    # size 64); with MINFER_KV_ROTATION=0 the same formats are stored unrotated: same
    # sizes, another basis, so only the recorded flag tells them apart.
    session = tmp_path / "r.session"
    kv = ("-ctk", "q8_0", "-ctv", "q8_0")
    a = minfer(MODEL, "--cnv", "--temp", "0", "-n", "8", "-t", "2", "--numerics", "llamacpp", *kv,
               "--session", session, stdin=b"What is the capital of France?")
    assert a.returncode == 0, a.stderr.decode()
    saved = session.read_bytes()
    plain = minfer(MODEL, "--cnv", "-t", "2", *kv, "--session", session, stdin=b"",
                   env={"MINFER_KV_ROTATION": "0"})
    assert plain.returncode == 1
    assert ("holds q8_0 KV rows rotated by llama.cpp's Walsh-Hadamard rotation, this run's are "
            "not" in plain.stderr.decode()), plain.stderr.decode()
    assert session.read_bytes() == saved  # the refused file is left as it was
    same = minfer(MODEL, "--cnv", "--temp", "0", "-n", "8", "-t", "2", "--numerics", "llamacpp", *kv,
                  "--session", session, stdin=b"And of Germany?")
    assert same.returncode == 0, same.stderr.decode()
    assert re.search(r"\[session\] resumed 2 message\(s\) and \d+ KV row\(s\) .* 0 tokens prefilled",
                     same.stderr.decode())


@needs_model
def test_cnv_with_no_template_is_refused():
    r = minfer(MODEL, "--cnv", "--no-template", stdin=b"")
    assert r.returncode == 1
    assert "--no-template is refused" in r.stderr.decode()


@needs_model
def test_single_shot_applies_the_model_template_unless_no_template():
    templ = minfer(MODEL, "What is the capital of France?", "--temp", "0", *FACTS, "-n", "16", "-t",
                   "2")
    assert templ.returncode == 0, templ.stderr.decode()
    assert "Paris" in templ.stdout.decode()
    assert "Prompt: 37 tokens" in templ.stderr.decode()  # rendered with SmolLM2's system prompt
    raw = minfer(MODEL, "What is the capital of France?", "--no-template", "--temp", "0", "-n", "4",
                 "-t", "2")
    assert "Prompt: 7 tokens" in raw.stderr.decode()
    sys_ = minfer(MODEL, "Hi", "--system", "You are a pirate.", "--temp", "0", "-n", "1", "-t", "2")
    assert sys_.returncode == 0
    assert "Notice" not in sys_.stderr.decode()


@needs_model
def test_template_command_prints_the_exact_render(tmp_path):
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "Hi"}]))
    r = minfer("template", MODEL, "--messages", msgs, "--add-generation-prompt")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                    "{{ eos_token }}")
    r = minfer("template", "--template", tmpl, "--messages", msgs, "--bos", "<s>", "--eos", "</s>")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == "<s>[user]Hi</s>"
    r = minfer("template", "--template", tmpl, "--messages", msgs, MODEL)
    assert r.returncode == 1 and "either a MODEL or --template" in r.stderr.decode()


def test_model_without_template_falls_back_to_chatml_with_a_notice():
    fixture = CACHE / "models" / "minfer-fixture-tiny-qwen2-f32.gguf"
    if not fixture.exists():
        pytest.skip(f"{fixture} not present")
    r = minfer(fixture, "hello", "-n", "2", "-t", "2")
    assert r.returncode == 0, r.stderr.decode()
    assert ("Notice: this GGUF has no tokenizer.chat_template; using the generic ChatML renderer"
            in r.stderr.decode())


def chat(*args, lines=(), timeout=300):
    return minfer(MODEL, "--cnv", "--temp", "0", *FACTS, "-t", "2", *args,
                  stdin="\n".join(lines).encode())


@needs_model
def test_no_byte_of_a_stop_string_is_shown_in_a_reply():
    full = chat("-n", "24", lines=["What is the capital of France?"]).stdout.decode()
    assert "Paris" in full, full
    # "Paris" and the character after it: " Paris" is one token, so the stop string
    # spans two tokens and " Paris" must be held back, not shown.
    at = full.index("Paris")
    stop = full[at: at + 6]
    r = chat("-n", "24", "--stop", stop, lines=["What is the capital of France?"])
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "Pari" not in out
    assert out == full[:at] + "\n"
    assert "stop string" in r.stderr.decode()


@needs_model
def test_help_and_history_cleared_go_to_stderr():
    r = chat(lines=["/help", "/clear"])
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b""
    err = r.stderr.decode()
    assert "/regen [N]" in err and "[history cleared]" in err


@needs_model
def test_a_refused_message_in_piped_mode_makes_the_exit_status_1():
    long_message = " ".join(["word"] * 200)
    r = chat("-c", "64", lines=[long_message])
    assert r.returncode == 1, r.stderr.decode()
    assert "context full: need" in r.stderr.decode()


@needs_model
def test_regen_with_a_negative_draw_is_an_error():
    r = chat("-n", "4", lines=["Hi", "/regen -1", "/regen x"])
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "/regen -1: N must be an integer >= 0" in err and "/regen x: N must be" in err
    assert len(reports(err)) == 1  # no reply was regenerated


@needs_model
def test_exit_line_counts_every_turn_across_clear():
    r = chat("-n", "4", lines=["Hi", "/clear", "Hello", "/regen"])
    assert r.returncode == 0, r.stderr.decode()
    assert "conversation ended after 2 turn(s) and 1 regen(s)" in r.stderr.decode()


@needs_model
def test_a_turn_notice_comes_before_its_stats_line():
    msg = "Tell me about " + " and ".join(["cats", "dogs", "birds", "fish", "horses", "cows"] * 3) + "."
    r = chat("-c", "200", "-n", "24", lines=[msg, msg, msg])
    assert r.returncode == 0, r.stderr.decode()
    err = r.stderr.decode()
    m = re.search(r"\[turn (\d+)\] context full: dropped the oldest", err)
    assert m, err
    stats = err.index(f"[turn {m.group(1)}] prefill")
    assert m.start() < stats, err


@needs_model
def test_single_turn_and_continued_lines():
    r = minfer(MODEL, "-st", "--temp", "0", "-t", "2", "-n", "4", stdin=b"Hi\nHello\n")
    assert r.returncode == 0, r.stderr.decode()
    assert len(reports(r.stderr.decode())) == 1
    # A trailing backslash continues the message; with -mli a trailing '/' ends it.
    r = chat("-n", "2", lines=["Hi\\", "there", "Bye"])
    assert len(reports(r.stderr.decode())) == 2
    r = chat("-n", "2", "-mli", lines=["Hi", "there/", "Bye/"])
    assert len(reports(r.stderr.decode())) == 2


@needs_model
def test_an_empty_session_file_starts_a_new_session(tmp_path):
    session = tmp_path / "s.session"
    session.write_bytes(b"")
    r = chat("-n", "4", "--session", session, lines=["Hi"])
    assert r.returncode == 0, r.stderr.decode()
    assert "is empty: a new session" in r.stderr.decode()
    assert session.stat().st_size > 0


@needs_model
def test_session_is_saved_after_every_turn_and_on_sigterm(tmp_path):
    session = tmp_path / "s.session"
    err = tmp_path / "err.txt"
    with open(err, "wb") as ef:
        p = subprocess.Popen([BIN, str(MODEL), "--cnv", "--temp", "0", "-t", "2", "-n", "8",
                              "--session", str(session)], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=ef)
        p.stdin.write(b"What is the capital of France?\n")
        p.stdin.flush()
        end = time.time() + 120
        while "[turn 1]" not in err.read_text() and time.time() < end:
            time.sleep(0.1)
        time.sleep(0.5)
        # Saved after the turn, while the conversation is still open.
        assert session.exists() and session.stat().st_size > 0, err.read_text()
        p.send_signal(15)  # SIGTERM
        rc = p.wait(timeout=60)
    assert rc == 128 + 15, err.read_text()
    assert "[session] saved 2 message(s)" in err.read_text()
    r = chat("-n", "4", "--session", session, lines=[])
    assert re.search(r"\[session\] resumed 2 message\(s\)", r.stderr.decode()), r.stderr.decode()


GEMMA = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"


@pytest.mark.skipif(not GEMMA.exists(), reason=f"{GEMMA} not present (scripts/setup.sh)")
def test_gemma3_conversation_keeps_its_kv_equal_to_a_fresh_prefill_of_the_render(tmp_path):
    """Gemma 3 270M (no template in the file: the built-in Gemma 3 template) through two
    turns of --cnv: the second turn prefills only its delta, and its greedy reply equals a
    fresh single-shot run on the canonical render of the conversation so far (the KV the
    chat kept is the KV a fresh prefill of that render makes)."""
    sess = tmp_path / "s.bin"
    r = minfer(GEMMA, "--cnv", "--temp", "0", "-t", "2", "-n", "12", "--session", sess,
               stdin=b"What is the capital of France?\nAnd of Italy?\n")
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "using the built-in Gemma 3 template" in err
    reps = reports(err)
    assert len(reps) == 2 and int(reps[1][3]) > int(reps[1][2]), reps  # turn 2: mostly reused
    raw = sess.read_bytes()
    doc, _ = json.JSONDecoder().raw_decode(raw[raw.index(b'{"messages"'):].decode("utf-8", "replace"))
    msgs = doc["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"], msgs
    m3 = tmp_path / "m.json"
    m3.write_text(json.dumps(msgs[:3]))
    tmpl = Path(__file__).resolve().parents[2] / "tests" / "data" / "templates" / "google-gemma-3-it.jinja"
    render = minfer("template", "--template", tmpl, "--bos", "<bos>", "--messages", m3,
                    "--add-generation-prompt")
    assert render.returncode == 0, render.stderr.decode()
    assert render.stdout.decode().startswith("<bos><start_of_turn>user\nWhat is the capital")
    fresh = minfer(GEMMA, render.stdout.decode(), "--no-template", "--temp", "0", "-t", "2", "-n", "12")
    assert fresh.returncode == 0, fresh.stderr.decode()
    assert fresh.stdout.decode().endswith(msgs[3]["content"]), (fresh.stdout, msgs[3]["content"])
