"""Stage 17 tests: speculative decoding in the server (--spec-ngram or -md, --draft-max,
--draft-min, --draft-p-min; per request llama-server's speculative.n_max / n_min / p_min) on a real
`minfer serve` with SmolLM2 on loopback. Bars: with and without speculation a request
gets the same bytes and the same logprobs (every row's), greedy over the prompts of
tests/data/speculative/prompts.json alone and beside concurrent neighbours (under
--numerics llamacpp the bytes and tokens: its logits depend on the batch in places); seeded sampling, a stop string and a JSON schema give the plain run's output;
streaming assembles to the non-streaming text and carries several tokens in a chunk;
speculative.n_max 0 turns it off and a request opts in on a server without it; bad fields
are 400; the /metrics counters move (accepted <= drafted, > 0 on a repeating text); a
draft model (the model requantized) drafts beside neighbours with the same bar, and one
with another vocabulary is refused at startup."""
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import BIN, MODEL, Server

TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", "tests/data"))
PROMPTS = json.loads((TESTDATA / "speculative" / "prompts.json").read_text())["prompts"]
COMPLETIONS = "/v1/completions"
N_TOKENS = 40
REPEATING = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."

SPEC_COUNTERS = ("minfer_spec_decode_draft_tokens_total", "minfer_spec_decode_accepted_tokens_total",
                 "minfer_spec_decode_drafts_total")


def start(*args):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
    return Server("--slots", 4, "--n-ctx", 512, "-t", 2, *args)


@pytest.fixture(scope="module", params=["default", "llamacpp"])
def spec_server(request):
    s = start("--numerics", request.param, "--spec-ngram", 2, "--draft-max", 8)
    s.numerics = request.param
    yield s
    s.kill()


def fresh(server):
    """Under llamacpp's numerics a prompt decoded after a cached prefix has other bits
    than one prefilled whole (its tiled kernels): every slot's cache erased, so both runs
    of a comparison prefill the same way and differ only by the drafts."""
    if getattr(server, "numerics", "default") != "default":
        for i in range(4):
            status, _ = server.request("POST", f"/slots/{i}?action=erase")
            assert status == 200


def complete(server, prompt, **kw):
    fresh(server)
    body = {"prompt": prompt, "max_tokens": N_TOKENS, "temperature": 0, "ignore_eos": True,
            "logprobs": 2, **kw}
    status, r = server.post(COMPLETIONS, body)
    assert status == 200, r
    ch = r["choices"][0]
    return ch["text"], ch["logprobs"], r["usage"]["completion_tokens"]


def same(server, got, want):
    """Bits under the default numerics: the text, every token and every logprob. Under
    llamacpp's a row's logits depend on its batch in places (as llama.cpp's do), so the
    text and the tokens (what the CLI's test holds it to as well)."""
    if getattr(server, "numerics", "default") == "default":
        return got == want
    return got[0] == want[0] and got[1]["tokens"] == want[1]["tokens"] and got[2] == want[2]


def spec_counts(server):
    m = server.metrics()
    return {k: m[k] for k in SPEC_COUNTERS}


def test_greedy_is_the_plain_runs_bytes_and_logprobs_alone(spec_server):
    before = spec_counts(spec_server)
    plain = [complete(spec_server, p, **{"speculative.n_max": 0}) for p in PROMPTS]
    assert spec_counts(spec_server) == before  # n_max 0: no draft ran
    for p, want in zip(PROMPTS, plain):
        assert want[2] == N_TOKENS
        assert same(spec_server, complete(spec_server, p), want), p
    after = spec_counts(spec_server)
    drafted = after["minfer_spec_decode_draft_tokens_total"] - before["minfer_spec_decode_draft_tokens_total"]
    accepted = (after["minfer_spec_decode_accepted_tokens_total"]
                - before["minfer_spec_decode_accepted_tokens_total"])
    assert 0 < accepted <= drafted
    assert after["minfer_spec_decode_drafts_total"] > before["minfer_spec_decode_drafts_total"]


def test_greedy_is_the_plain_runs_bytes_beside_concurrent_neighbours(spec_server):
    if spec_server.numerics != "default":
        pytest.skip("under llamacpp's numerics a row's bits depend on its batch and the cache, "
                    "with or without drafts (docs/USAGE.md)")
    # Every prompt, speculating, four at a time with different neighbours each round
    # (and some neighbours not speculating): the answers of the requests run alone.
    alone = {p: complete(spec_server, p, **{"speculative.n_max": 0}) for p in PROMPTS}
    jobs = [(p, {}) for p in PROMPTS] + [(p, {"speculative.n_max": 3}) for p in PROMPTS[::-1]] + \
           [(p, {"speculative.n_max": 0}) for p in PROMPTS[::3]]
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda j: complete(spec_server, j[0], **j[1]), jobs))
    for (p, kw), g in zip(jobs, got):
        assert same(spec_server, g, alone[p]), (p, kw)


def test_streaming_assembles_to_the_non_streaming_text_several_tokens_a_chunk(spec_server):
    want, want_lp, _ = complete(spec_server, REPEATING, max_tokens=64)
    status, raw = spec_server.request("POST", COMPLETIONS, {
        "prompt": REPEATING, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
        "logprobs": 2, "stream": True})
    assert status == 200
    text, tokens, widest = "", [], 0
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])["choices"][0]
            text += ch["text"]
            lp = ch.get("logprobs") or {}
            tokens += lp.get("tokens") or []
            widest = max(widest, len(lp.get("tokens") or []))
    assert text == want
    assert tokens == want_lp["tokens"]
    assert widest > 1  # a verified draft delivered several tokens in one step


def test_seeded_sampling_stop_strings_and_json_schema_are_the_plain_runs(spec_server):
    off = {"speculative.n_max": 0}
    for kw in ({"temperature": 1.0, "seed": 7, "max_tokens": 48},
               {"stop": ["mat.", "example"], "max_tokens": 48},
               {"max_tokens": 48, "ignore_eos": False, "response_format": {"type": "json_object"}}):
        for p in (REPEATING, PROMPTS[0], PROMPTS[3]):
            assert same(spec_server, complete(spec_server, p, **kw),
                        complete(spec_server, p, **kw, **off)), (p, kw)
    # The stop string is exact: the text ends right before its first occurrence.
    whole, _, _ = complete(spec_server, REPEATING, max_tokens=48)
    text, _, _ = complete(spec_server, REPEATING, stop=["mat."], max_tokens=48)
    assert "mat." in whole and text == whole[:whole.index("mat.")]


def test_chat_with_speculation_is_the_plain_chat(spec_server):
    body = {"messages": [{"role": "user", "content": "Count: one, two, three, four, one, two, three,"}],
            "max_tokens": 32, "temperature": 0}
    outs = []
    for n_max in (0, 6):
        status, r = spec_server.post("/v1/chat/completions", {**body, "speculative.n_max": n_max})
        assert status == 200, r
        outs.append(r["choices"][0]["message"]["content"])
    assert outs[0] == outs[1] and outs[0]


def test_props_shows_the_request_defaults(spec_server):
    status, body = spec_server.request("GET", "/props")
    assert status == 200
    params = json.loads(body)["default_generation_settings"]["params"]
    assert params["speculative.n_max"] == 8
    assert params["speculative.n_min"] == 0
    assert params["speculative.p_min"] == pytest.approx(0.75)


def test_metrics_counters_and_vllm_names(spec_server):
    before = spec_counts(spec_server)
    complete(spec_server, REPEATING, max_tokens=64, **{"speculative.n_max": 16})
    m = spec_server.metrics()
    drafted = m["minfer_spec_decode_draft_tokens_total"]
    accepted = m["minfer_spec_decode_accepted_tokens_total"]
    assert drafted > before["minfer_spec_decode_draft_tokens_total"]
    assert accepted - before["minfer_spec_decode_accepted_tokens_total"] > 0
    assert accepted <= drafted
    assert m["vllm:spec_decode_num_draft_tokens_total"] == drafted
    assert m["vllm:spec_decode_num_accepted_tokens_total"] == accepted
    assert m["vllm:spec_decode_num_drafts_total"] == m["minfer_spec_decode_drafts_total"]
    assert m["minfer_spec_decode_acceptance_rate"] == pytest.approx(accepted / drafted)


@pytest.mark.parametrize("body, needle", [
    ({"speculative.n_max": -1}, "'speculative.n_max' must be in [0, 1024]"),
    ({"speculative.n_max": 5000}, "'speculative.n_max' must be in [0, 1024]"),
    ({"speculative.n_max": "4"}, "'speculative.n_max' must be an integer"),
    ({"speculative.n_max": 2.5}, "'speculative.n_max' must be an integer"),
    ({"speculative.n_min": -2}, "'speculative.n_min' must be in [0, 1024]"),
    ({"speculative.p_min": 1.5}, "'speculative.p_min' must be in [0, 1]"),
    ({"speculative.p_min": "high"}, "'speculative.p_min' must be a number"),
    ({"speculative.n_max": 2, "speculative.n_min": 5}, "is above 'speculative.n_max'"),
    ({"speculative.n_min": 9}, "is above the draft's maximum 8"),
    ({"speculative": {"n_max": 4}}, "give 'speculative.n_max'"),
])
def test_bad_speculative_fields_are_400(spec_server, body, needle):
    for path, base in ((COMPLETIONS, {"prompt": "hi"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        status, r = spec_server.post(path, {**base, "max_tokens": 4, **body})
        assert status == 400, r
        assert needle in r["error"]["message"], r


@pytest.fixture(scope="module")
def plain_server():
    s = start()
    yield s
    s.kill()


def test_a_request_opts_in_on_a_server_without_spec_ngram(plain_server):
    status, body = plain_server.request("GET", "/props")
    assert json.loads(body)["default_generation_settings"]["params"]["speculative.n_max"] == 0
    before = spec_counts(plain_server)
    want = complete(plain_server, REPEATING, max_tokens=64)
    assert spec_counts(plain_server) == before  # off by default
    got = complete(plain_server, REPEATING, max_tokens=64, **{"speculative.n_max": 8})
    assert got == want
    after = spec_counts(plain_server)
    assert after["minfer_spec_decode_accepted_tokens_total"] > before["minfer_spec_decode_accepted_tokens_total"]
    # speculative.n_min alone asks for nothing on a server that does not speculate.
    assert complete(plain_server, REPEATING, max_tokens=64, **{"speculative.n_min": 4}) == want
    assert spec_counts(plain_server) == after


@pytest.fixture(scope="module")
def draft_server(tmp_path_factory):
    # A draft model made by `minfer quantize` (the model requantized to Q4_0): the same
    # vocabulary, other logits, so its drafts are often right and sometimes not.
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
    draft = tmp_path_factory.mktemp("draft") / "draft-q4_0.gguf"
    q = subprocess.run([BIN, "quantize", MODEL, draft, "Q4_0", "--allow-requantize", "-t", "2"],
                       capture_output=True, timeout=300)
    assert q.returncode == 0, q.stderr.decode()
    # -td 1: the draft model runs on its own one-thread pool.
    s = start("-md", draft, "--draft-max", 6, "-td", 1)
    yield s
    s.kill()


def test_a_draft_model_drafts_and_the_output_is_the_plain_runs(draft_server):
    before = spec_counts(draft_server)
    alone = {p: complete(draft_server, p, **{"speculative.n_max": 0}) for p in PROMPTS[::2]}
    assert spec_counts(draft_server) == before
    # p_min 0: the draft model proposes every step's whole draft (more rows to reject).
    jobs = [(p, {"speculative.p_min": 0.0}) for p in PROMPTS[::2]] + \
           [(p, {}) for p in PROMPTS[::4]] + [(p, {"speculative.n_max": 0}) for p in PROMPTS[1::4]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda j: complete(draft_server, j[0], **j[1]), jobs))
    for (p, kw), g in zip(jobs, got):
        if p in alone:
            assert g == alone[p], (p, kw)
    after = spec_counts(draft_server)
    drafted = after["minfer_spec_decode_draft_tokens_total"] - before["minfer_spec_decode_draft_tokens_total"]
    accepted = (after["minfer_spec_decode_accepted_tokens_total"]
                - before["minfer_spec_decode_accepted_tokens_total"])
    assert 0 < accepted < drafted  # mostly right, not always: the rejections ran too


def test_a_draft_model_with_another_vocabulary_is_an_error():
    gemma = MODEL.parent / "gemma-3-270m-q4_k_m.gguf"
    if not gemma.exists() or not MODEL.exists():
        pytest.skip("the models are not present (scripts/setup.sh)")
    r = subprocess.run([BIN, "serve", str(MODEL), "--port", "0", "-t", "2", "-md", str(gemma)],
                       capture_output=True, timeout=300)
    assert r.returncode != 0
    assert "the draft model's vocabulary differs from the target's" in r.stderr.decode()


@pytest.mark.parametrize("args, needle", [
    (["--spec-ngram", 2, "--draft-max", 4, "--draft-min", 6], "--draft-min 6 is above --draft-max 4"),
    (["--spec-ngram", 2, "-md", "draft.gguf"], "give --spec-ngram or -md"),
    (["--draft-max", 0], "--draft-max"),
    (["-td", 1], "-td 1: there is no draft model (give -md PATH)"),
])
def test_serve_usage_errors(args, needle):
    r = subprocess.run([BIN, "serve", str(MODEL), "--port", "0", *map(str, args)],
                       capture_output=True, timeout=60)
    assert r.returncode != 0
    assert needle in r.stderr.decode(), r.stderr.decode()
