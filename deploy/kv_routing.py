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
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BLOCK = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def metric(url, name):
    for line in http(url + "/metrics").decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def run(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


class Netns:
    """Namespace minfer-kvI with a veth pair: host side 10.213.I.1, inside 10.213.I.2."""

    def __init__(self, i):
        self.name, self.host_if, self.ns_if = f"minfer-kv{i}", f"mkv{i}h", f"mkv{i}n"
        self.addr = f"10.213.{i}.2"
        run("ip", "netns", "add", self.name)
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if,
            "netns", self.name)
        run("ip", "addr", "add", f"10.213.{i}.1/24", "dev", self.host_if)
        run("ip", "link", "set", self.host_if, "up")
        for args in (("addr", "add", f"{self.addr}/24", "dev", self.ns_if),
                     ("link", "set", self.ns_if, "up"), ("link", "set", "lo", "up")):
            run("ip", "netns", "exec", self.name, "ip", *args)

    def close(self):
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def netns_works():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["ip", "netns", "add", "minfer-kv-probe"], capture_output=True)
    if probe.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", "minfer-kv-probe"], capture_output=True)
    return True


class Replica:
    def __init__(self, args, i, ns, logdir):
        self.i, self.ns = i, ns
        host = ns.addr if ns else "127.0.0.1"
        port = 8080 if ns else free_port()
        kv_port = 5557 if ns else free_port()
        replay_port = 5558 if ns else free_port()
        self.url, self.events = f"http://{host}:{port}", f"tcp://{host}:{kv_port}"
        self.replay = f"tcp://{host}:{replay_port}"
        cmd = [args.minfer, "serve", args.model, "--host", host, "--port", str(port),
               "--slots", "2", "-t", str(args.threads), "--n-ctx", "1024"]
        if not args.control:
            cmd += ["--kv-events", f"tcp://*:{kv_port}", "--kv-events-replay",
                    f"tcp://*:{replay_port}", "--kv-block-size", str(BLOCK)]
        if ns:
            cmd = ["ip", "netns", "exec", ns.name, *cmd]
        self.log = open(os.path.join(logdir, f"replica{i}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        ready = threading.Event()

        def wait_listening():
            for line in self.proc.stdout:
                if "listening on http://" in line:
                    ready.set()
                    return

        threading.Thread(target=wait_listening, daemon=True).start()
        if not ready.wait(120):
            raise RuntimeError(f"replica {i} did not start (log: {self.log.name})")


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
    namespaces, replicas, router = [], [], None
    try:
        for i in range(args.replicas):
            namespaces.append(Netns(i) if use_ns else None)
            replicas.append(Replica(args, i, namespaces[-1], logdir))
        router_port = free_port()
        cmd = [args.router, "--host", "127.0.0.1", "--port", str(router_port), "--policy",
               "kv_aware", "--log-level", "debug", "--worker-urls", *[r.url for r in replicas]]
        if not args.control:
            cmd += ["--kv-event-block-size", str(BLOCK), "--kv-event-model",
                    os.path.basename(args.model)]
            for r in replicas:
                cmd += ["--kv-event-source", f"{r.url}={r.events}",
                        "--kv-event-replay-source", f"{r.url}={r.replay}"]
        router_log = open(os.path.join(logdir, "router.log"), "w")
        router = subprocess.Popen(cmd, stdout=router_log, stderr=subprocess.STDOUT)
        router_url = f"http://127.0.0.1:{router_port}"
        t0 = time.time()
        while True:
            try:
                http(router_url + "/health", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if router.poll() is not None or time.time() - t0 > 60:
                    print(f"kv_routing: the router did not start (log: {router_log.name})")
                    return 2
                time.sleep(0.2)
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
            router.kill()
            router.wait(10)
        for r in replicas:
            r.proc.kill()
            r.proc.wait(10)
        for ns in namespaces:
            if ns:
                ns.close()


if __name__ == "__main__":
    sys.exit(main())
