"""Stage 18 tests (the command line): flags as llama.cpp users type them, usage errors,
range checks, file-path errors, the context rule, stop strings, terminal-only
behaviours (through a pseudo-terminal) and the help text against docs/USAGE.md — on
SmolLM2 (skipped when the model cache lacks it). Each test drives the real binary."""
import errno
import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The capital of France is"
RAW = ["--no-template", "--greedy", "-t", "2"]

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")


def minfer(*args, stdin=b"", timeout=300):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, input=stdin, timeout=timeout)


def usage_error(r, *needles):
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert err.startswith("minfer: error: ") or "\nminfer: error: " in err, err
    for n in needles:
        assert n in err, err
    assert r.stdout == b""


def on_pty(args, stdin_tty=False, stdout_tty=False, send=b"", timeout=120, resend_s=None):
    """Runs minfer with stdin and/or stdout on a pseudo-terminal; returns (rc, what the
    terminal showed, stderr). With resend_s, `send` is typed again every resend_s seconds
    while the program runs (a line editor that sets up the terminal discards what was
    typed before it)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([BIN, *map(str, args)], stdin=slave if stdin_tty else subprocess.DEVNULL,
                         stdout=slave if stdout_tty else subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(slave)
    if send:
        time.sleep(0.5)
        os.write(master, send)
    next_send = time.time() + (resend_s or 0)
    shown = b""
    end = time.time() + timeout
    while time.time() < end:
        if resend_s and time.time() >= next_send and p.poll() is None:
            os.write(master, send)
            next_send = time.time() + resend_s
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError as e:
                if e.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk and p.poll() is not None:
                break
            shown += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read() if p.stdout else b""
    err = p.stderr.read()
    p.wait(timeout=10)
    os.close(master)
    return p.returncode, shown if stdout_tty else out, err.decode()


# ---------------------------------------------------------------- usage errors


@needs_model
def test_unknown_flag_is_named_even_when_it_takes_a_value():
    usage_error(minfer(MODEL, "hi", "--frobnicate", "3"), "unknown flag '--frobnicate'")
    usage_error(minfer(MODEL, "hi", "-xyz", "3"), "unknown flag '-xyz'")


@pytest.mark.parametrize("args,needle", [
    (["-n", "abc"], "-n: 'abc' is not an integer"),
    (["-n"], "-n needs a value"),
    (["--temp", "warm"], "--temp: 'warm' is not a number"),
    (["--top-p", "1.5"], "--top-p: 1.5 is out of range"),
    (["--temp", "-1"], "--temp: -1 is out of range"),
    (["-c", "-3"], "-c: -3 is out of range"),
    (["-c", "5000000000"], "-c: 5000000000 is out of range"),
    (["-s", "99999999999999999999999"], "-s: 99999999999999999999999 is out of range"),
    (["-s", "-2"], "-s: '-2' is not a non-negative integer"),
    (["--mirostat", "3"], "--mirostat: 3 is out of range"),
    (["--logit-bias", "12x"], "--logit-bias: '12x' is not TOKEN_ID+BIAS"),
    (["--greedy=1"], "--greedy takes no value"),
])
def test_usage_errors_have_the_prefix_and_exit_1(args, needle):
    usage_error(minfer("model.gguf", "hi", *args), needle)


@pytest.mark.parametrize("cmd", [["info", "--bogus"], ["tokenize", "m", "--bogus"],
                                 ["embed", "m", "x", "--bogus"], ["embed", "m", "x", "--pooling", "max"],
                                 ["embed", "m", "x", "--embd-output-format", "xml"],
                                 ["template", "--bogus"], ["bench", "m", "--bogus"],
                                 ["bench", "m", "-o", "xml"], ["bench", "m", "-p", "1,x"]])
def test_every_subcommand_reports_usage_errors_the_same_way(cmd):
    usage_error(minfer(*cmd))


def test_help_lists_flags_without_parser_leftovers():
    r = minfer("--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    for leftover in ("Positionals:", "OPTIONS:", "args TEXT", "[Option Group", "REQUIRED",
                     "Run with --help", "TEXT ...", "INT", "FLOAT", "UINT"):
        assert leftover not in out, leftover
    assert "-ngl, --gpu-layers" in out and "-c, --ctx-size, --n-ctx N" in out


def _flags_in(text):
    return set(re.findall(r"(?<![\w`-])(--?[a-zA-Z][a-zA-Z0-9-]*)", text))


def test_every_help_flag_is_in_usage_md_and_every_usage_flag_in_help():
    helps = ""
    for cmd in ([], ["info"], ["tokenize"], ["embed"], ["template"], ["bench"], ["serve"], ["viz"],
                ["perplexity"], ["quantize"],
                ["split"], ["merge"], ["convert"], ["list"], ["rm"], ["pull"]):
        r = minfer(*cmd, "--help")
        assert r.returncode == 0, (cmd, r.stderr.decode())
        helps += r.stdout.decode()
    help_flags = set()
    for line in helps.splitlines():
        # A flag line: "  -c, --ctx-size, --n-ctx N      help"; the names end at the
        # first word that is not a flag (the value's name).
        if not line.startswith("  -"):
            continue
        for word in line.split("  ")[1].split():
            if not word.startswith("-"):
                break
            help_flags.add(word.rstrip(","))
    usage = (ROOT / "docs" / "USAGE.md").read_text()
    usage = re.sub(r"```.*?```", "", usage, flags=re.S)  # example output blocks
    # The tests-and-CI section speaks of cmake's and ctest's flags, not minfer's.
    usage = re.sub(r"^## Tests and CI\n.*?(?=^## |\Z)", "", usage, flags=re.S | re.M)
    # Flags in USAGE.md: every one written in backticks (the flag tables, the llama.cpp
    # mapping); numbers such as `-1` are values, not flags.
    usage_flags = set()
    for code in re.findall(r"`([^`]+)`", usage):
        usage_flags |= _flags_in(code)
    missing_in_usage = help_flags - usage_flags
    missing_in_help = usage_flags - help_flags
    assert not missing_in_usage, f"in --help but not in docs/USAGE.md: {sorted(missing_in_usage)}"
    assert not missing_in_help, f"in docs/USAGE.md but not in any --help: {sorted(missing_in_help)}"


def test_version_names_commit_build_type_and_cpu_kernels():
    r = minfer("--version")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert re.match(r"minfer v\d+\.\d+\.\d+\n", out), out
    assert re.search(r"^commit: [0-9a-f]{7,}|^commit: unknown", out, re.M), out
    assert re.search(r"^build: \w+", out, re.M), out
    assert re.search(r"^cpu kernels: (scalar|avx2|avx512)", out, re.M), out


# ---------------------------------------------------------------- llama.cpp spellings


def test_list_devices_prints_the_cpu_first_in_llama_cpp_shape():
    r = minfer("--list-devices")
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "Available devices:", lines
    assert re.match(r"  cpu: CPU, (scalar|avx2|avx512) kernels, \d+ thread\(s\), host memory$",
                    lines[1]), lines
    usage_error(minfer("--list-devices", "extra"), "--list-devices takes no arguments")


@needs_model
def test_device_cpu_and_none_give_the_cpu_run():
    base = minfer(MODEL, PROMPT, *RAW, "-n", "8")
    assert base.returncode == 0, base.stderr.decode()
    for dev in ("cpu", "none"):
        r = minfer(MODEL, PROMPT, *RAW, "-n", "8", "--device", dev)
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout == base.stdout


@needs_model
def test_llama_cpp_spellings_are_accepted():
    r = minfer(MODEL, "--ctx-size", 256, "-sys", "You are terse.", "-b", 8, "-ub", 4, "--no-mmap",
               "--mlock", "--jinja", "--typical", 0.9, "--mirostat", 0, "--mirostat-lr", 0.1,
               "--mirostat-ent", 5, "--dry-multiplier", 0.5, "--dry-base", 1.75,
               "--dry-allowed-length", 2, "--dry-penalty-last-n", 64, "--dry-sequence-breaker",
               "\n", "--xtc-probability", 0, "--xtc-threshold", 0.1, "--repeat-last-n", 32,
               "--presence-penalty", 0.1, "--frequency-penalty", 0.1, "--logit-bias", "1+0.5",
               "-r", "zzzz", "--reverse-prompt", "qqqq", "--ignore-eos", "-v", "--color", "-no-cnv",
               "--no-display-prompt", "--simple-io", "-n", 3, "-t", 2, "-p", "Hi", "--predict", 3)
    assert r.returncode == 0, r.stderr.decode()
    err = r.stderr.decode()
    assert "Generated: 3 tokens" in err
    assert "[verbose] sampler:" in err and "typical 0.9" in err


@needs_model
def test_gpu_flags_are_accepted_with_a_notice():
    r = minfer(MODEL, PROMPT, *RAW, "-n", 2, "-ngl", 99, "-fa", "on", "--gpu-layers", 10)
    assert r.returncode == 0, r.stderr.decode()
    err = r.stderr.decode()
    # The last -ngl wins (llama.cpp's parsing); with the CPU alone it is one notice.
    assert "notice: -ngl 10: this build has no GPU backend; every layer runs on the CPU" in err
    assert "-ngl 99" not in err
    assert "notice: -fa: ignored" in err
    # -fa takes on/off/auto only when given: here "Paris" stays the prompt.
    r2 = minfer(MODEL, "-fa", PROMPT, *RAW, "-n", 2)
    assert r2.returncode == 0, r2.stderr.decode()
    assert "Prompt: 5 tokens" in r2.stderr.decode()


@needs_model
def test_repeated_flag_last_value_wins_and_stop_repeats(tmp_path):
    r = minfer(MODEL, PROMPT, *RAW, "-n", 2, "-n", 3)
    assert r.returncode == 0, r.stderr.decode()
    assert "Generated: 3 tokens" in r.stderr.decode()
    full = minfer(MODEL, PROMPT, *RAW, "-n", 8).stdout
    assert b"France" in full or b"." in full
    # Two stop strings both apply: whichever comes first ends the text.
    r = minfer(MODEL, PROMPT, *RAW, "-n", 8, "--stop", "zzzz", "--stop", ".")
    assert r.stdout == full[: full.index(b".")]


@needs_model
def test_prompt_file_and_stdin_drop_one_trailing_newline(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(PROMPT + "\n")
    a = minfer(MODEL, *RAW, "-n", 4, "-p", PROMPT)
    b = minfer(MODEL, *RAW, "-n", 4, "-f", f)
    c = minfer("-m", MODEL, *RAW, "-n", 4, stdin=(PROMPT + "\n").encode())
    assert a.returncode == b.returncode == c.returncode == 0, c.stderr.decode()
    assert "Prompt: 5 tokens" in b.stderr.decode() and "Prompt: 5 tokens" in c.stderr.decode()
    assert a.stdout == b.stdout == c.stdout


@needs_model
def test_batch_size_chunks_the_prefill_without_changing_the_bytes():
    a = minfer(MODEL, PROMPT, *RAW, "-n", 8)
    b = minfer(MODEL, PROMPT, *RAW, "-n", 8, "-b", 2)
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout


@needs_model
def test_ignore_eos_generates_past_the_end_of_turn():
    a = minfer(MODEL, "Say hi.", "--greedy", "-t", 2, "-n", 80)
    assert "stop: eog" in a.stderr.decode(), a.stderr.decode()
    b = minfer(MODEL, "Say hi.", "--greedy", "-t", 2, "-n", 80, "--ignore-eos")
    assert b.returncode == 0
    assert "Generated: 80 tokens" in b.stderr.decode() and "stop: n_predict" in b.stderr.decode()


@needs_model
def test_logit_bias_bans_a_token():
    ids = minfer("tokenize", MODEL, " Paris", "--ids", "--no-special").stdout.decode().split()
    assert len(ids) == 1
    plain = minfer(MODEL, PROMPT, *RAW, "-n", 1).stdout
    assert plain == b" Paris"
    r = minfer(MODEL, PROMPT, *RAW, "-n", 1, "--logit-bias", f"{ids[0]}-inf")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout != b" Paris"
    assert "an infinite bias is applied as -100" in r.stderr.decode()
    # llama.cpp's short spelling, and llama-tokenize's -p for the text.
    assert minfer("tokenize", MODEL, "-p", " Paris", "--ids", "--no-special").stdout.decode().split() == ids
    short = minfer(MODEL, PROMPT, *RAW, "-n", 1, "-l", f"{ids[0]}-inf")
    assert short.returncode == 0 and short.stdout == r.stdout
    usage_error(minfer("tokenize", MODEL, "x", "-p", "y"), "tokenize: give TEXT or -p, not both")


@needs_model
def test_chat_template_by_name_and_as_text():
    a = minfer(MODEL, "Hi", "--chat-template", "chatml", "-t", 2, "-n", 1, "--greedy")
    # ChatML without the model template's default system prompt: 10 tokens, not 31.
    assert a.returncode == 0 and "Prompt: 10 tokens" in a.stderr.decode(), a.stderr.decode()
    b = minfer(MODEL, "Hi", "--chat-template", "[{{ messages[0]['content'] }}]", "-t", 2, "-n", 1)
    assert b.returncode == 0 and "Prompt: 3 tokens" in b.stderr.decode(), b.stderr.decode()
    usage_error(minfer(MODEL, "Hi", "--chat-template", "vicuna-9"), "unknown template name 'vicuna-9'")


# ---------------------------------------------------------------- bench


@needs_model
def test_bench_takes_m_and_comma_lists_and_writes_llama_bench_fields():
    r = minfer("bench", "-m", MODEL, "-p", "4,8", "-n", 2, "-t", "1,2", "-r", 1, "-o", "json")
    assert r.returncode == 0, r.stderr.decode()
    rows = json.loads(r.stdout)
    assert [(x["test"], x["n_threads"]) for x in rows] == [
        ("pp4", 1), ("pp8", 1), ("tg2", 1), ("pp4", 2), ("pp8", 2), ("tg2", 2)]
    for x in rows:
        for key in ("avg_ts", "stddev_ts", "avg_ns", "stddev_ns", "samples_ns", "samples_ts",
                    "n_prompt", "n_gen", "model_filename", "model_size", "model_n_params",
                    "build_commit", "backends", "test_time", "ts_mean", "ts_stddev"):
            assert key in x, key
        assert x["avg_ts"] == x["ts_mean"] > 0
    assert rows[1]["n_prompt"] == 8 and rows[1]["n_gen"] == 0 and rows[2]["n_gen"] == 2


@needs_model
def test_bench_depth_runs_each_test_over_a_prefilled_kv():
    r = minfer("bench", MODEL, "-p", 4, "-n", 2, "-d", "0,8", "-t", 1, "-r", 1, "-o", "json")
    assert r.returncode == 0, r.stderr.decode()
    rows = json.loads(r.stdout)
    assert [(x["test"], x["n_depth"], x["n_prompt"], x["n_gen"]) for x in rows] == [
        ("pp4", 0, 4, 0), ("pp4@d8", 8, 4, 0), ("tg2", 0, 0, 2), ("tg2@d8", 8, 0, 2)]
    assert all(x["avg_ts"] > 0 for x in rows)
    usage_error(minfer("bench", MODEL, "-n", 2, "-d", 8, "--parallel", 2, "-r", 1),
                "--n-depth and --parallel")
    usage_error(minfer("bench", MODEL, "-p", 8, "-n", 0, "-d", 100000, "-r", 1),
                "do not fit the context")


@needs_model
def test_bench_prompt_beyond_the_context_is_a_usage_error():
    usage_error(minfer("bench", MODEL, "-p", 100000, "-n", 0, "-r", 1), "do not fit the context")


# ---------------------------------------------------------------- files and paths


@needs_model
def test_a_directory_where_a_file_is_expected_is_named(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    msgs = tmp_path / "m.json"
    msgs.write_text('[{"role": "user", "content": "Hi"}]')
    for args in (["template", MODEL, "--messages", d], ["template", "--template", d, "--messages", msgs],
                 [MODEL, "hi", "--chat-template-file", d], [MODEL, "-cnv", "--session", d],
                 ["tokenize", MODEL, "--file", d], [MODEL, "-f", d]):
        usage_error(minfer(*args), f"'{d}' is a directory")


@needs_model
def test_a_fifo_as_the_model_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    for args in ([fifo, "hi"], ["info", fifo], ["tokenize", fifo, "hi"], ["bench", fifo, "-r", 1]):
        usage_error(minfer(*args, timeout=20), "is a FIFO")


@needs_model
def test_output_paths_are_checked_before_the_model_loads(tmp_path):
    for flag in ("--dump-json", "--dump-logits"):
        r = minfer(MODEL, PROMPT, *RAW, "-n", 1, flag, tmp_path / "missing" / "out")
        usage_error(r, f"{flag}: folder", "does not exist")
        assert "Loading model" not in r.stderr.decode()
    r = minfer(MODEL, "-cnv", "--session", tmp_path / "missing" / "s.session")
    usage_error(r, "--session: folder")
    assert "Loading model" not in r.stderr.decode()


# ---------------------------------------------------------------- numbers and the context


@needs_model
def test_threads_beyond_the_cores_are_capped_with_a_notice():
    r = minfer(MODEL, PROMPT, *RAW[:2], "-n", 2, "-t", 40000)
    assert r.returncode == 0, r.stderr.decode()
    cores = os.cpu_count()
    assert f"notice: -t 40000 capped at {cores} (the CPU cores)" in r.stderr.decode()
    assert f"threads {cores}" in r.stderr.decode()


@needs_model
def test_n_minus_one_is_unlimited_and_other_negatives_are_errors():
    usage_error(minfer(MODEL, PROMPT, *RAW, "-n", -5), "-n: -5 is out of range [-1,")
    r = minfer(MODEL, PROMPT, *RAW, "-n", -1, "-c", 12, "--ignore-eos")
    assert r.returncode == 0, r.stderr.decode()
    assert "Generated: 8 tokens" in r.stderr.decode() and "stop: context full" in r.stderr.decode()


@needs_model
def test_seed_minus_one_draws_a_seed_and_prints_it():
    a = minfer(MODEL, PROMPT, "--no-template", "-t", 2, "-n", 12, "--temp", 1.5, "-s", -1)
    assert a.returncode == 0, a.stderr.decode()
    m = re.search(r"seed: (\d+) \(random; -s \1 repeats this run\)", a.stderr.decode())
    assert m, a.stderr.decode()
    b = minfer(MODEL, PROMPT, "--no-template", "-t", 2, "-n", 12, "--temp", 1.5, "-s", m.group(1))
    assert a.stdout == b.stdout


@needs_model
def test_ctx_zero_is_the_model_context_and_above_it_is_capped_with_a_notice():
    r = minfer(MODEL, PROMPT, *RAW, "-n", 1, "-c", 0)
    assert r.returncode == 0 and "n_ctx 8192" in r.stderr.decode(), r.stderr.decode()
    r = minfer(MODEL, PROMPT, *RAW, "-n", 1, "-c", 100000)
    assert r.returncode == 0
    assert r.stderr.decode().count("notice: -c 100000 capped at 8192 (the model's context length)") == 1
    assert "n_ctx 8192" in r.stderr.decode()


@needs_model
def test_context_smaller_than_the_prompt_is_an_error_naming_both():
    usage_error(minfer(MODEL, PROMPT, *RAW, "-n", 4, "-c", 3),
                "the prompt has 5 tokens but the context holds 3 (-c 3)")


# ---------------------------------------------------------------- output


@needs_model
def test_no_byte_of_a_stop_string_reaches_stdout():
    full = minfer(MODEL, PROMPT, *RAW, "-n", 8).stdout
    assert full.startswith(b" Paris.")
    # " Paris" and "." are two tokens: the first must be held back, not printed.
    r = minfer(MODEL, PROMPT, *RAW, "-n", 8, "--stop", "Paris.")
    assert r.returncode == 0
    assert r.stdout == b" "
    assert "stop: stop string" in r.stderr.decode()
    # A held prefix that turns out not to be a stop string is printed in full.
    r = minfer(MODEL, PROMPT, *RAW, "-n", 8, "--stop", "Paris!")
    assert r.stdout == full


@needs_model
def test_sampled_invalid_utf8_becomes_replacement_characters():
    r = minfer(MODEL, "Write Chinese and emoji: 你好 😀", "--temp", 3, "--top-k", 0, "--top-p", 1,
               "--repeat-penalty", 1, "-n", 200, "-t", 2, "-s", 1)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode("utf-8")  # strict: raises on any invalid byte
    assert "\ufffd" in text


@needs_model
def test_newline_is_added_at_the_end_only_when_stdout_is_a_terminal():
    piped = minfer(MODEL, PROMPT, *RAW, "-n", 2)
    assert piped.stdout == b" Paris."
    rc, shown, err = on_pty([MODEL, PROMPT, *RAW, "-n", 2], stdout_tty=True)
    assert rc == 0, err
    assert shown == b" Paris.\r\n"


@needs_model
def test_a_terminal_on_stdin_gets_a_hint_when_no_prompt_is_given():
    rc, out, err = on_pty(["-m", MODEL, *RAW, "-n", 2], stdin_tty=True, send=PROMPT.encode() + b"\n\x04")
    assert rc == 0, err
    assert "reading the prompt from stdin; Ctrl-D to end" in err
    assert "Prompt: 5 tokens" in err
    assert out == b" Paris."


def test_doubled_bos_warns_once():
    fixture = CACHE / "models" / "minfer-fixture-tiny-llama-f32.gguf"
    if not fixture.exists():
        pytest.skip(f"{fixture} not present (tools/make_test_models.sh)")
    r = minfer(fixture, "<s>hello", "--no-template", "-n", 1, "-t", 2)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr.decode().count("warning: the prompt starts with two BOS tokens") == 1
    r = minfer(fixture, "hello", "--no-template", "-n", 1, "-t", 2)
    assert "two BOS" not in r.stderr.decode()


# ---------------------------------------------------------------- the in-process entry


def test_escaped_exceptions_become_an_error_exit():
    # Any input at all ends with a status, never an abort: a few hostile ones.
    for args in (["-t", "99999999999999999999"], ["--ctx-size="], ["bench", "-p", ",,"],
                 ["-fa"], ["--", "-n"], ["template", "--messages"]):
        r = minfer(*args, timeout=30)
        assert r.returncode in (0, 1), (args, r.returncode, r.stderr.decode())
        assert r.returncode >= 0


@needs_model
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs a worker thread to fail to start")
@pytest.mark.skipif(os.environ.get("MINFER_SANITIZE") == "1",
                    reason="ASan maps terabytes of shadow memory: nothing starts under ulimit -v")
def test_thread_creation_failure_is_an_error_not_an_abort():
    # A stack limit larger than the address-space limit makes pthread_create fail.
    r = subprocess.run(["bash", "-c", f"ulimit -s 8000000; ulimit -v 6000000; exec '{BIN}' '{MODEL}' hi "
                        "-n 2 -t 2 --greedy"], capture_output=True, timeout=120)
    usage_error(r, "cannot start 2 worker thread(s)")


def test_flags_of_the_other_mode_are_refused_not_ignored(tmp_path):
    usage_error(minfer("model.gguf", "-cnv", "--dump-json", tmp_path / "o.json"),
                "--dump-* flags apply to single-shot generation")
    usage_error(minfer("model.gguf", "hi", "--session", tmp_path / "s"),
                "--session needs the conversation mode (-cnv)")


@needs_model
@pytest.mark.parametrize("flags,k,v", [
    ([], "f32", "f32"),
    (["-ctk", "q8_0"], "q8_0", "f32"),            # llama.cpp: the other keeps its default
    (["-ctk", "q8_0", "-ctv", "f16"], "q8_0", "f16"),
    (["--cache-type", "f16"], "f16", "f16"),      # minfer's flag: both
    (["--cache-type", "f16", "-ctv", "q4_0"], "f16", "q4_0"),
    (["--numerics", "llamacpp", "-ctv", "f16"], "f16", "f16"),
])
def test_k_and_v_cache_types_are_set_apart(flags, k, v):
    r = minfer("bench", "-m", MODEL, "-p", 8, "-n", 2, "-r", 1, "-t", 1, "-o", "json", *flags)
    assert r.returncode == 0, r.stderr.decode()
    rows = json.loads(r.stdout)
    assert {(row["type_k"], row["type_v"]) for row in rows} == {(k, v)}


@needs_model
def test_mixed_k_and_v_cache_types_generate_and_a_bad_one_names_its_flag():
    r = minfer(MODEL, PROMPT, *RAW, "-n", 4, "-ctk", "q8_0", "-ctv", "f16")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip()
    usage_error(minfer(MODEL, PROMPT, *RAW, "-n", 2, "-ctk", "f16", "-ctv", "q5_1"),
                "-ctv: unknown KV cache type 'q5_1'")
    # llama.cpp's flash attention reads f16 or quantized cells, not f32 ones
    usage_error(minfer(MODEL, PROMPT, *RAW, "-n", 2, "--numerics", "llamacpp", "-ctk", "f32"),
                "--numerics llamacpp needs an f16, q8_0 or q4_0 KV cache (cache type is f32/f16)")


@needs_model
def test_escape_turns_backslash_sequences_into_bytes_only_when_asked(tmp_path):
    def ids(text, *extra):
        out = tmp_path / "o.json"
        r = minfer(MODEL, text, *RAW, "-n", 1, "--dump-json", out, *extra)
        assert r.returncode == 0, r.stderr.decode()
        return json.loads(out.read_text())["prompt_ids"]
    assert ids("a\\nb", "-e") == ids("a\nb")
    assert ids("a\\nb") != ids("a\nb")
    assert ids("a\\nb", "-e", "--no-escape") == ids("a\\nb")


def test_random_argument_vectors_end_with_status_0_or_1():
    # A cheap in-tree cousin of the argument-parser fuzz target: flags, values and junk
    # in random order must end in "minfer: error:" / exit 1 (or a help text, exit 0),
    # never a signal or another status. The model never exists, so nothing loads.
    import random
    rng = random.Random(1234)
    help_text = minfer("--help").stdout.decode()
    flags = sorted({w.rstrip(",") for line in help_text.splitlines() if line.startswith("  -")
                    for w in line.split("  ")[1].split() if w.startswith("-")})
    values = ["", "0", "-1", "-2", "1", "99999999999999999999", "1e39", "nan", "inf", "-inf",
              "on", "x", "1,2", ",", "=", "--", "-", "15043+1", "2-inf", "\xff", "/", "none",
              "chatml", "{{ x }}", "{%", "model.gguf"]
    # Every command names a model that does not exist (bench and info would otherwise
    # measure / read the default model).
    cmds = [["model.gguf"], ["info", "model.gguf"], ["tokenize", "model.gguf"], ["template"],
            ["embed", "model.gguf"],
            ["bench", "model.gguf"], ["model.gguf", "-cnv"], ["-m", "model.gguf"]]
    for _ in range(250):
        args = list(rng.choice(cmds))
        for _ in range(rng.randint(0, 6)):
            pick = rng.random()
            if pick < 0.5:
                args.append(rng.choice(flags))
            elif pick < 0.6:
                args.append(rng.choice(flags) + "=" + rng.choice(values))
            else:
                args.append(rng.choice(values))
        r = subprocess.run([BIN, *args], capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        assert r.returncode in (0, 1), (args, r.returncode, r.stderr.decode(errors="replace"))
        if r.returncode == 1:
            assert b"minfer: error: " in r.stderr, (args, r.stderr)


def test_no_arguments_is_a_usage_error():
    usage_error(minfer(), "no command or model given")


# Usage errors that need no model come before the model is looked for: a missing model
# file must not hide them (and a present one is never loaded for them).
@pytest.mark.parametrize("args,needle", [
    (["--cache-type", "q5_0"], "--cache-type: unknown KV cache type 'q5_0'"),
    (["--numerics", "bogus"], "--numerics"),
    (["--chat-template", "bogus"], "--chat-template: unknown template name 'bogus'"),
    (["-ctk", "f16", "-ctv", "q5_0"], "-ctv: unknown KV cache type 'q5_0'"),
    (["--chat-template-kwargs", "[1]"], "--chat-template-kwargs: expected a JSON object"),
    (["--device", "nosuch"], "--device: unknown device 'nosuch' (available: cpu"),
    (["-dev", "cpu,"], "--device 'cpu,': an empty name"),
])
@pytest.mark.parametrize("mode", [[], ["-cnv"]])
def test_usage_errors_come_before_the_model_is_opened(args, needle, mode):
    r = minfer("no-such-model.gguf", "hi", *mode, *args)
    usage_error(r, needle)
    assert "no-such-model" not in r.stderr.decode()


@pytest.mark.parametrize("cmd", [["bench", "no-such-model.gguf"],
                                 ["perplexity", "no-such-model.gguf", "-f", "/dev/null"],
                                 ["serve", "no-such-model.gguf"], ["viz", "no-such-model.gguf"]])
def test_subcommands_check_kv_and_numerics_flags_before_the_model(cmd):
    for args, needle in ((["--cache-type", "q5_0"], "--cache-type: unknown KV cache type 'q5_0'"),
                         (["--numerics", "bogus"], "--numerics"),
                         (["--device", "nosuch"], "unknown device 'nosuch'")):
        r = minfer(*cmd, *args)
        usage_error(r, needle)
        assert "no-such-model" not in r.stderr.decode()


@needs_model
def test_context_overflow_hint_never_names_a_context_the_model_cannot_have(tmp_path):
    model_ctx = 8192  # SmolLM2-135M's n_ctx_train
    long_prompt = tmp_path / "long.txt"
    long_prompt.write_text("hello " * (model_ctx + 200))
    r = minfer(MODEL, "-f", long_prompt, "--no-template", "-n", "4", "-t", "2")
    usage_error(r, f"the model's context holds at most {model_ctx}", "shorten the prompt")
    assert "-c " not in r.stderr.decode()
    # A prompt that fits the model but not -c: the hint names a -c the model can have.
    short = tmp_path / "short.txt"
    short.write_text("hello " * 100)
    r = minfer(MODEL, "-f", short, "--no-template", "-n", "4", "-c", "32", "-t", "2")
    err = r.stderr.decode()
    usage_error(r, "(-c 32)", f"up to the model's {model_ctx}")
    suggested = int(re.search(r"no room to generate \(-c (\d+)", err).group(1))
    assert 100 < suggested <= model_ctx


# ---------------------------------------------------------------- Ollama's and llama.cpp's verbs


@needs_model
def test_run_with_a_prompt_is_the_plain_generation_and_without_one_the_conversation():
    plain = minfer(MODEL, PROMPT, *RAW, "-n", 6)
    run = minfer("run", MODEL, PROMPT, *RAW, "-n", 6)
    assert plain.returncode == run.returncode == 0, run.stderr.decode()
    assert run.stdout == plain.stdout and plain.stdout
    # No prompt and stdin not a terminal: the prompt comes from stdin, as `ollama run` does.
    piped = minfer("run", MODEL, *RAW, "-n", 6, stdin=PROMPT.encode())
    assert piped.returncode == 0 and piped.stdout == plain.stdout
    # No prompt on a terminal: the conversation (its banner and prompt), ended by /exit.
    rc, shown, err = on_pty(["run", MODEL, "-t", "2", "-n", "4"], stdin_tty=True,
                            send=b"/exit\r", timeout=120, resend_s=1.0)
    assert rc == 0, err
    assert "/help for commands" in err


def test_help_command_prints_the_same_as_dash_dash_help():
    top = minfer("--help")
    assert top.returncode == 0
    assert minfer("help").stdout == top.stdout
    assert minfer("help", "run").stdout == top.stdout
    for cmd in ("quantize", "serve", "bench", "list"):
        a, b = minfer("help", cmd), minfer(cmd, "--help")
        assert a.returncode == b.returncode == 0, cmd
        assert a.stdout == b.stdout and a.stdout, cmd
    usage_error(minfer("help", "frobnicate"), "help: no command 'frobnicate'")
    usage_error(minfer("run"), "run: no model given")


@needs_model
def test_interactive_prompt_cache_threads_batch_and_no_warmup_spellings(tmp_path):
    base = minfer(MODEL, PROMPT, *RAW, "-n", 4)
    r = minfer(MODEL, PROMPT, *RAW, "-n", 4, "--no-warmup", "-tb", 2)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == base.stdout
    assert "-tb" not in r.stderr.decode()  # -tb equal to -t: nothing to say
    r = minfer(MODEL, PROMPT, *RAW, "-n", 4, "--threads-batch", 1)
    assert r.returncode == 0 and r.stdout == base.stdout
    assert "notice: -tb 1: prefill uses the same threads as decode" in r.stderr.decode()
    # -i is the conversation; --prompt-cache is the session file.
    cache = tmp_path / "s.session"
    r = minfer(MODEL, "-i", "--prompt-cache", cache, "-t", 2, "-n", 4, "--greedy",
               stdin=b"Hello\n/exit\n")
    assert r.returncode == 0, r.stderr.decode()
    assert cache.stat().st_size > 0 and "[session] saved" in r.stderr.decode()
