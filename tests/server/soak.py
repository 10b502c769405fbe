"""The server under mixed real traffic, for test_soak.py (full size, label long) and
test_soak_short.py (a short run that the sanitizer pass also makes, for leaks).

One run: `requests` completions from `clients` well-behaved clients (half streaming, half
not, each checked whole) while `slowloris` sockets dribble header bytes, `leavers` clients
drop their connection at random points and `stallers` streaming readers stop reading. A
separate process probes /health every 50 ms (its own interpreter: the load's threads
cannot delay its clock). Returns what the tests assert on."""
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

COMP = "/v1/completions"
PROMPTS = ["The sky is", "Once upon a time", "List three fruits:", "def add(a, b):",
           "The capital of France is", "Water boils at", "My favourite colour is",
           "In 1969, the first"]

PROBE = r"""
import http.client, sys, time
host, port, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import os
lat, errors = [], 0
while not os.path.exists(stop):
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection(host, port, timeout=5)
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        c.close()
        if r.status != 200:
            errors += 1
    except Exception:
        errors += 1
    lat.append(time.perf_counter() - t0)
    time.sleep(0.05)
print(errors, " ".join(f"{x:.6f}" for x in lat))
"""


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def _request_bytes(body, path=COMP):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def one_request(host, port, rng, stream):
    """One well-behaved completion; returns None when it is whole, else what was wrong."""
    n = rng.randint(1, 8)
    body = {"prompt": rng.choice(PROMPTS), "max_tokens": n, "ignore_eos": True,
            "temperature": 0, "stream": stream}
    c = http.client.HTTPConnection(host, port, timeout=120)
    try:
        c.request("POST", COMP, body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            return f"HTTP {r.status}: {data[:200]!r}"
        if not stream:
            got = json.loads(data)
            if got["usage"]["completion_tokens"] != n:
                return f"completion_tokens {got['usage']['completion_tokens']} != {n}"
            return None
        events = [ln[6:] for ln in data.decode().split("\n") if ln.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            return f"stream without [DONE]: {data[-200:]!r}"
        chunks = [json.loads(e) for e in events[:-1]]
        finish = [ch["choices"][0].get("finish_reason") for ch in chunks if ch.get("choices")]
        if finish[-1] != "length":
            return f"stream finish_reason {finish[-1]!r}"
        return None
    except Exception as e:  # noqa: BLE001 - any failure of a well-behaved client counts
        return f"{type(e).__name__}: {e}"
    finally:
        c.close()


def run(server, requests, clients, slowloris, leavers, stallers, seed=1):
    host, port = server.url.split("//")[1].split(":")
    port = int(port)
    pid = server.proc.pid
    stop = threading.Event()
    out = {"errors": [], "done": 0, "rss": {}, "leaves": 0, "slowloris_opened": 0}
    lock = threading.Lock()
    fds0 = open_fds(pid)

    # /health prober in its own interpreter.
    stop_file = f"/tmp/minfer-soak-stop-{os.getpid()}-{seed}"
    if os.path.exists(stop_file):
        os.unlink(stop_file)
    probe = subprocess.Popen([sys.executable, "-c", PROBE, host, str(port), stop_file],
                             stdout=subprocess.PIPE, text=True)

    # Slowloris: each socket sends its request line, then a header line now and then.
    def slow():
        socks = []

        def fresh():
            s = socket.create_connection((host, port), timeout=5)
            s.setblocking(False)
            s.send(b"GET /health HTTP/1.1\r\n")
            out["slowloris_opened"] += 1
            return s

        while len(socks) < slowloris and not stop.is_set():
            try:
                socks.append(fresh())
            except OSError:
                time.sleep(0.05)
        while not stop.is_set():
            for i in range(len(socks)):
                try:
                    socks[i].send(b"X-Slow: 1\r\n")
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:  # the server closed it (its read timeout): open another
                    socks[i].close()
                    try:
                        socks[i] = fresh()
                    except OSError:
                        pass
            stop.wait(0.5)
        for s in socks:
            s.close()

    # Leavers: a request, then the connection is dropped before the answer or mid-stream.
    def leave():
        rng = random.Random(seed * 7919)
        for _ in range(leavers):
            if stop.wait(rng.uniform(0.1, 1.0)):
                return
            stream = rng.random() < 0.5
            body = {"prompt": rng.choice(PROMPTS), "max_tokens": 200, "ignore_eos": True,
                    "temperature": 0, "stream": stream}
            try:
                s = socket.create_connection((host, port), timeout=30)
                s.sendall(_request_bytes(body))
                if stream:
                    want = rng.randint(1, 2000)
                    got = 0
                    while got < want:
                        b = s.recv(want - got)
                        if not b:
                            break
                        got += len(b)
                else:
                    time.sleep(rng.uniform(0.0, 0.5))
                s.close()
                with lock:
                    out["leaves"] += 1
            except OSError as e:
                with lock:
                    out["errors"].append(f"leaver could not connect: {e}")

    # Stallers: streaming requests whose readers never read (small receive buffers).
    stalled = []
    for i in range(stallers):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, port))
        s.sendall(_request_bytes({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 400,
                                  "ignore_eos": True, "temperature": 0, "stream": True,
                                  "logprobs": 20}))
        stalled.append(s)

    next_id = iter(range(requests))

    def client(k):
        rng = random.Random(seed * 1000 + k)
        while True:
            with lock:
                i = next(next_id, None)
            if i is None:
                return
            err = one_request(host, port, rng, stream=(i % 2 == 1))
            with lock:
                if err is not None:
                    out["errors"].append(f"request {i}: {err}")
                out["done"] += 1
                done = out["done"]
            if done % 1000 == 0:
                out["rss"][done] = rss_kib(pid)

    threads = [threading.Thread(target=slow, daemon=True),
               threading.Thread(target=leave, daemon=True)]
    for t in threads:
        t.start()
    t0 = time.time()
    workers = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    out["wall_s"] = time.time() - t0
    out["rss_end"] = rss_kib(pid)
    stop.set()
    for t in threads:
        t.join(60)
    for s in stalled:
        s.close()
    open(stop_file, "w").close()
    text, _ = probe.communicate(timeout=30)
    os.unlink(stop_file)
    first, rest = text.split(" ", 1) if " " in text.strip() else (text.strip(), "")
    out["health_errors"] = int(first)
    out["health_s"] = sorted(float(x) for x in rest.split())
    # Every socket the run opened is closed: the server's descriptors come back to where
    # they were (connections close within the keep-alive and read timeouts).
    deadline = time.time() + 30
    while time.time() < deadline and open_fds(pid) > fds0:
        time.sleep(0.2)
    out["fds0"], out["fds_end"] = fds0, open_fds(pid)
    return out


def p99(xs):
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]
