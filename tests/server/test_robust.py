"""Stage 17: the server against clients that leave, stop reading or crowd it (real server
on loopback, the real SmolLM2 model)."""
import json
import os
import socket
import time

from conftest import SANITIZE, needs_model

COMP = "/v1/completions"
LONG = {"prompt": "Once upon a time", "max_tokens": 1800, "ignore_eos": True, "temperature": 0}


def open_request(s, body, path=COMP):
    """Sends one POST on a raw socket and returns the socket, unread."""
    host, port = s.url.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    data = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def log_line(s, needle, timeout_s=10):
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        line = next((ln for ln in s.stderr().splitlines() if needle in ln), None)
        if line is not None:
            return line
        time.sleep(0.05)
    raise AssertionError(f"no log line with {needle!r}: {s.stderr()}")


@needs_model
def test_non_streaming_client_gone_frees_its_slot_within_2s(make_server):
    s = make_server("--slots", 1, "--n-ctx", 2048, "-t", 2)
    sock = open_request(s, LONG)
    s.wait_metric("minfer_requests_running", lambda v: v == 1)
    time.sleep(0.5)
    sock.close()
    t0 = time.time()
    s.wait_metric("minfer_requests_running", lambda v: v == 0, timeout_s=2)
    assert time.time() - t0 < 2
    assert s.metrics()["minfer_requests_cancelled_total"] == 1
    line = log_line(s, "POST /v1/completions")
    assert " 499 prompt=" in line, line
    completion = int(line.split("completion=")[1].split()[0])
    assert 1 <= completion < 1800, line
    # With one slot, a new request is served at once.
    t0 = time.time()
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 2}, timeout=10)
    assert st == 200 and body["usage"]["completion_tokens"] == 2
    assert time.time() - t0 < 5


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def timed_completion(s, n=16):
    t0 = time.time()
    st, body = s.post(COMP, {"prompt": "The sky is", "max_tokens": n, "ignore_eos": True,
                             "temperature": 0}, timeout=60)
    assert st == 200 and body["usage"]["completion_tokens"] == n, body
    return time.time() - t0


def stalled_stream(s):
    """Opens a stream that is never read. A small receive buffer and large frames (20 top
    logprobs a token) fill the socket within a few hundred tokens."""
    host, port = s.url.split("//")[1].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    data = json.dumps({**LONG, "stream": True, "logprobs": 20}).encode()
    sock.sendall(f"POST {COMP} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    s.wait_metric("minfer_requests_running", lambda v: v == 1)
    return sock


@needs_model
def test_stream_that_is_never_read_is_cancelled_after_stream_timeout_others_keep_speed(make_server):
    # --timeout (the write timeout) is shorter: the stream still gets its 2 s.
    s = make_server("--slots", 2, "--n-ctx", 2048, "-t", 2, "--stream-timeout", 2,
                    "--timeout", 1)
    timed_completion(s)  # warm
    baseline = min(timed_completion(s) for _ in range(3))
    # One stalled stream first, so that the memory baseline includes what running the
    # path once costs (under ASan its fake stacks are mapped on a thread's first use).
    warm = stalled_stream(s)
    s.wait_metric("minfer_requests_cancelled_total", lambda v: v == 1, timeout_s=60)
    s.wait_metric("minfer_requests_running", lambda v: v == 0, timeout_s=2)
    warm.close()
    rss0 = rss_kib(s.proc.pid)
    sock = stalled_stream(s)
    # The other slot serves at its usual speed while the stream stalls and is cancelled.
    t0 = time.time()
    slowest = 0.0
    while s.metrics()["minfer_requests_cancelled_total"] == 1:
        assert time.time() - t0 < 60, s.stderr()
        slowest = max(slowest, timed_completion(s))
    # A stalled write that held the engine would add its 2 s to every completion here.
    # The Release pass bars 4x the lone time + 1 s (~1.6 s), which catches that. Under
    # ASan, where a lone completion takes ~1 s and the stream's 20-logprob steps are
    # shared until it pauses, one run on this host read 5.3x alone on the machine, so
    # there the bar is 8x + 1 s: only a gross stall.
    factor = 8 if SANITIZE else 4
    assert slowest < factor * baseline + 1.0, (slowest, baseline)
    t0 = time.time()  # the log lines follow the metric
    while len(lines := [ln for ln in s.stderr().splitlines()
                        if "POST /v1/completions 499" in ln]) < 2 and time.time() - t0 < 10:
        time.sleep(0.05)
    assert len(lines) == 2, s.stderr()
    assert s.stderr().count("a stream took no bytes for 2 s: cancelled") == 2
    completion = int(lines[-1].split("completion=")[1].split()[0])
    assert 1 <= completion < 1800, lines[-1]
    s.wait_metric("minfer_requests_running", lambda v: v == 0, timeout_s=2)
    assert rss_kib(s.proc.pid) - rss0 < 32 << 10
    sock.close()


def read_response(sock, timeout_s=2):
    """Reads until the server closes the connection; returns (status, headers, body)."""
    sock.settimeout(timeout_s)
    data = b""
    while True:
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@needs_model
def test_connections_past_max_connections_get_503_retry_after_promptly_health_200(make_server):
    s = make_server("--slots", 1, "--max-connections", 4, "-t", 1)
    host, port = s.url.split("//")[1].split(":")
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(6)]
    try:
        time.sleep(0.3)  # four hold the connection threads; two are past the cap
        for path in ("/v1/models", "/v1/chat/completions"):
            c = socket.create_connection((host, int(port)), timeout=5)
            t0 = time.time()
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            status, headers, body = read_response(c)  # closed by the server
            assert time.time() - t0 < 1.0
            assert status == 503 and headers["retry-after"] == "1", (status, headers)
            err = json.loads(body)["error"]
            assert err["type"] == "unavailable_error" and "--max-connections" in err["message"]
            c.close()
        # /health is answered past the cap too.
        c = socket.create_connection((host, int(port)), timeout=5)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_response(c)
        assert status == 200 and json.loads(body) == {"status": "ok"}
        c.close()
    finally:
        for c in idle:
            c.close()
    assert s.healthy()


def closed_within(sock, seconds):
    """Whether the server closes `sock` (reads b"" or a reset) within `seconds`; what
    it sends first (a 400 for a request cut short) is read and dropped."""
    sock.settimeout(0.1)
    t0 = time.time()
    while time.time() - t0 < seconds:
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            pass
        except ConnectionResetError:
            return True
    return False


@needs_model
def test_keep_alive_timeout_flag_closes_idle_connections_after_1s_default_keeps_5s(make_server):
    for args, closes in ((("--keep-alive-timeout", 1), True), ((), False)):
        s = make_server("--slots", 1, "-t", 1, *args)
        host, port = s.url.split("//")[1].split(":")
        c = socket.create_connection((host, int(port)), timeout=5)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.recv(65536).startswith(b"HTTP/1.1 200")
        assert closed_within(c, 2.5) == closes, args
        c.close()
        s.kill()


def ended_within(sock, seconds):
    """Whether the server answers (a 400 for a request cut short) or closes
    `sock` within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(65536)[:12] in (b"", b"HTTP/1.1 400")
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


@needs_model
def test_timeout_flag_ends_a_stalled_request_after_1s_default_keeps_5s(make_server):
    for args, ends in ((("--timeout", 1), True), ((), False)):
        s = make_server("--slots", 1, "-t", 1, *args)
        host, port = s.url.split("//")[1].split(":")
        # Headers begun, then nothing: the read times out.
        c = socket.create_connection((host, int(port)), timeout=5)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        assert ended_within(c, 2.5) == ends, args
        c.close()
        # A body begun, then nothing: the same timeout.
        c = socket.create_connection((host, int(port)), timeout=5)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert ended_within(c, 2.5) == ends, args
        c.close()
        s.kill()


@needs_model
def test_health_is_503_loading_model_until_the_model_is_loaded_then_200(tmp_path):
    import os
    import subprocess
    import urllib.error
    import urllib.request

    from conftest import BIN, MODEL

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.headers, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read())

    env = dict(os.environ, MINFER_TEST_LOAD_DELAY_MS="2000")
    with open(tmp_path / "err.log", "w") as err:
        proc = subprocess.Popen([BIN, "serve", str(MODEL), "--port", "0", "-t", "1"], env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        first = proc.stdout.readline()
        assert "loading the model on http://" in first, first
        url = first.split(" on ")[1].split()[0]
        status, headers, body = get(url + "/health")
        assert status == 503 and body == {"status": "loading model"}
        status, headers, body = get(url + "/v1/models")
        assert status == 503 and headers["Retry-After"] == "1"
        assert body["error"]["type"] == "unavailable_error"
        assert "listening on " + url in proc.stdout.readline()
        status, _, body = get(url + "/health")
        assert status == 200 and body == {"status": "ok"}
        status, _, body = get(url + "/v1/models")
        assert status == 200 and body["data"][0]["id"] == MODEL.name
    finally:
        proc.kill()
        proc.wait(30)
