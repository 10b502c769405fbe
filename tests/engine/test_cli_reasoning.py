"""Stage 18 tests (CLI generation path) for reasoning models: `minfer MODEL PROMPT` on a
thinking template prints the thinking block on stderr and the answer alone on stdout;
--reasoning-format none keeps it all on stdout; --reasoning-budget closes the block. The
conversation mode (-cnv) splits each reply the same way.
The model is a random-weight Qwen3-shaped fixture whose thinking never ends by itself;
the template is DeepSeek-R1-Distill-Llama's (its prompt ends inside an open block)."""
import os
import subprocess
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "minfer-fixture-tiny-qwen3-f32.gguf"
DATA = Path(os.environ.get("MINFER_TESTDATA_DIR", Path(__file__).resolve().parents[1] / "data"))
R1 = DATA / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present")


def minfer(*args):
    cmd = [BIN, MODEL, "What is two plus two?", "--chat-template-file", R1, "--temp", 0, "-n", 20,
           "-t", 2, *args]
    r = subprocess.run(list(map(str, cmd)), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode(), r.stderr.decode()


def thinking_of(err):
    # The run header lines, then the thinking, then "Generated:".
    lines = err.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("Prefill:")) + 1
    end = next(i for i, l in enumerate(lines) if l.startswith("Generated:"))
    return "\n".join(lines[start:end]).strip()


def test_budget_puts_the_thinking_on_stderr_and_the_answer_alone_on_stdout():
    out, err = minfer("--reasoning-budget", 6)
    thought = thinking_of(err)
    assert thought and out.strip()
    assert "think>" not in out and "think>" not in err
    assert thought not in out and "\x1b[" not in err  # stderr is a pipe here: no ANSI


def test_reasoning_format_none_prints_the_block_on_stdout_as_text():
    split_out, split_err = minfer("--reasoning-budget", 6)
    out, err = minfer("--reasoning-budget", 6, "--reasoning-format", "none")
    assert thinking_of(err) == ""
    before, after = out.split("</think>")
    assert before.strip() == thinking_of(split_err)
    assert after.strip() == split_out.strip()


def test_without_a_budget_the_block_never_closes_and_stdout_stays_empty():
    out, err = minfer()
    assert out == "" and thinking_of(err)


def test_budget_zero_means_no_thinking():
    out, err = minfer("--reasoning-budget", 0)
    assert out.strip() and thinking_of(err) == ""


@pytest.mark.parametrize("flag,value", [("--reasoning-format", "xml"), ("--reasoning-budget", -2),
                                        ("--reasoning-budget", "many")])
def test_bad_reasoning_flags_are_usage_errors(flag, value):
    r = subprocess.run([BIN, MODEL, "hi", flag, str(value)], capture_output=True, timeout=60)
    assert r.returncode != 0 and flag in r.stderr.decode()


def conversation(*args):
    # Two turns through stdin; each reply is 12 tokens, its thinking closed after 4.
    cmd = [BIN, MODEL, "-cnv", "--chat-template-file", R1, "--reasoning-budget", 4, "-n", 12,
           "--temp", 0, "-t", 2, *args]
    r = subprocess.run(list(map(str, cmd)), input=b"What is two plus two?\nAnd three plus three?\n",
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode(), r.stderr.decode()


def turn_thoughts(err):
    # Each turn's thinking is the stderr text just before its "[turn N] prefill" line.
    lines = err.splitlines()
    ends = [i for i, l in enumerate(lines) if l.startswith("[turn ") and " prefill " in l]
    starts = [next(i for i, l in enumerate(lines) if "/help for commands" in l) + 1] + ends[:-1]
    return ["\n".join(l for l in lines[s:e] if not l.startswith("[turn ")).strip()
            for s, e in zip(starts, ends)]


def test_conversation_puts_each_turns_thinking_on_stderr_and_the_answers_on_stdout():
    out, err = conversation()
    thoughts = turn_thoughts(err)
    assert len(thoughts) == 2 and all(thoughts), err
    answers = out.splitlines()
    assert len(answers) == 2 and all(a.strip() for a in answers), out
    assert "think>" not in out and "think>" not in err
    for t in thoughts:
        assert t not in out
    assert "\x1b[" not in err  # stderr is a pipe here: no ANSI


def test_conversation_with_reasoning_format_none_prints_each_block_on_stdout():
    split_out, split_err = conversation()
    out, err = conversation("--reasoning-format", "none")
    assert turn_thoughts(err) == ["", ""]
    assert out.count("</think>") == 2
    # Turn by turn, the block before the tag is the thinking the split run printed on
    # stderr, the text after it the split run's answer.
    blocks = out.split("</think>")
    thoughts = turn_thoughts(split_err)
    assert blocks[0].strip() == thoughts[0]
    answers = split_out.splitlines()
    assert blocks[1].strip().startswith(answers[0].strip())
    assert blocks[1].strip().endswith(thoughts[1])
    assert blocks[2].strip() == answers[1].strip()
