#!/usr/bin/env python3
"""KV-aware routing across minfer replicas: starts N `minfer serve --kv-events` replicas
and vllm-router's kv_aware policy subscribed to their events, then checks that every
later turn of a multi-turn conversation lands on the replica that holds its prefix.

Each replica runs in its own network namespace (a veth pair, 10.213.I.2 inside, the
router on the host side) when `ip netns` works (root); otherwise on loopback ports.
Conversation I's first turn is sent to replica I directly, so the conversations start
spread over the replicas; the next turns go through the router, and each must arrive
at replica I (its minfer_requests_total rises) with its whole previous prompt taken
from the cache (usage.prompt_tokens_details.cached_tokens, minfer_prefix_reused_tokens).
The replicas also serve the replay socket and the router is given it
(--kv-event-replay-source); vllm-router 0.1.17 asks for a replay only on a gap in the
sequence numbers, not when it joins late (it then skips stores whose parent it never
saw), so the router is started before the first request.
Prompts are token ids (`/v1/completions`), so the router needs no tokenizer.

  python3 deploy/kv_routing.py --minfer build/ci/apps/minfer/minfer \\
      --model ~/.cache/minfer/models/SmolLM2-135M-Instruct.Q4_1.gguf --replicas 3

Exit status 0 when every routed turn landed on its prefix's replica; 1 otherwise; 2
when the set-up failed. vllm-router: PyPI `vllm-router` (`--router PATH`, default the
one on PATH)."""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

from replicas import Deployment, Router, http, metric, netns_works

BLOCK = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--router", default=shutil.which("vllm-router"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--netns", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--control", action="store_true",
                    help="replicas without --kv-events, router without sources: shows what the "
                         "routing is without the events (turns are expected to miss)")
    args = ap.parse_args()
    if not args.router or not os.path.exists(args.router):
        print("kv_routing: vllm-router not found (pip install vllm-router; --router PATH)")
        return 2
    use_ns = args.netns == "on" or (args.netns == "auto" and netns_works())
    logdir = tempfile.mkdtemp(prefix="minfer-kv-routing-")
    deployment, router = None, None
    try:
        deployment = Deployment(args.minfer, args.model, args.replicas, logdir, use_ns,
                                threads=args.threads, kv_events=not args.control, block=BLOCK)
        replicas = deployment.replicas
        cmd = [args.router, "--policy", "kv_aware", "--log-level", "debug", "--worker-urls",
               *[r.url for r in replicas]]
        if not args.control:
            cmd += ["--kv-event-block-size", str(BLOCK), "--kv-event-model",
                    os.path.basename(args.model)]
            for r in replicas:
                cmd += ["--kv-event-source", f"{r.url}={r.events}",
                        "--kv-event-replay-source", f"{r.url}={r.replay}"]
        try:
            router = Router(cmd, logdir)
        except RuntimeError as e:
            print(f"kv_routing: {e}")
            return 2
        router_url = router.url
        time.sleep(1.0)  # the router's SUB sockets connect
        print(f"kv_routing: {args.replicas} replicas "
              f"({'network namespaces' if use_ns else 'loopback ports'}), router {router_url}, "
              f"logs in {logdir}")

        rng = random.Random(5)
        convs = [[rng.randrange(1000, 40000) for _ in range(40)] for _ in replicas]
        ok = True
        for turn in range(args.turns):
            for i, conv in enumerate(convs):
                previous = len(conv)
                conv += [rng.randrange(1000, 40000) for _ in range(24)]
                before = [metric(r.url, "minfer_requests_total") for r in replicas]
                reused_before = metric(replicas[i].url, "minfer_prefix_reused_tokens_total")
                via = replicas[i].url if turn == 0 else router_url
                body = json.loads(http(via + "/v1/completions",
                                       {"model": os.path.basename(args.model), "prompt": conv,
                                        "max_tokens": 1, "temperature": 0}))
                after = [metric(r.url, "minfer_requests_total") for r in replicas]
                landed = [j for j in range(len(replicas)) if after[j] > before[j]]
                cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
                reused = metric(replicas[i].url, "minfer_prefix_reused_tokens_total") - reused_before
                if turn == 0:
                    print(f"  conversation {i} turn 0: sent to replica {i} ({len(conv)} tokens)")
                    continue
                good = landed == [i] and cached == previous and reused == previous
                ok = ok and good
                print(f"  conversation {i} turn {turn}: router -> replica {landed} "
                      f"(holder {i}), cached {cached}/{len(conv)} tokens "
                      f"{'ok' if good else 'WRONG'}")
                time.sleep(0.2)  # the replica's events reach the router
        print("kv_routing: " + ("every turn landed on its prefix's replica" if ok
                                else "some turns missed their prefix's replica"))
        return 0 if ok else 1
    finally:
        if router is not None:
            router.close()
        if deployment is not None:
            deployment.close()


if __name__ == "__main__":
    sys.exit(main())
