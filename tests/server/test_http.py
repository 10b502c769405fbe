"""Stage 17 tests: the HTTP layer of `minfer serve` on loopback — bodies read as JSON
whatever their Content-Type, 405 with Allow on a known route, CORS preflights and
origins, the body limit enforced while reading, and the request log of a client that
left mid-stream."""
import http.client
import json
import socket
import time
import urllib.parse

import pytest

from conftest import needs_model

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def conn(server, timeout=60):
    u = urllib.parse.urlparse(server.url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def assert_openai_error(data, status):
    err = json.loads(data)["error"]
    assert err["code"] == status
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    return err


@needs_model
@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_json_body_accepted_whatever_content_type(server, content_type):
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0})
    c = conn(server)
    headers = {"Content-Type": content_type} if content_type else {}
    c.request("POST", COMP, body=body.encode(), headers=headers)
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, data[:300]
    assert json.loads(data)["usage"]["completion_tokens"] == 2


@needs_model
def test_form_body_that_is_not_json_is_400_openai_shaped(server):
    c = conn(server)
    c.request("POST", CHAT, body=b"messages=hi",
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    r = c.getresponse()
    assert r.status == 400
    assert_openai_error(r.read(), 400)["type"] == "invalid_request_error"


def call(server, method, path, body=None, headers=None):
    c = conn(server)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r.status, r.headers, r.read()


@needs_model
@pytest.mark.parametrize("method,path,allow", [
    ("GET", CHAT, "POST, OPTIONS"),
    ("DELETE", COMP, "POST, OPTIONS"),
    ("PUT", "/tokenize", "POST, OPTIONS"),
    ("POST", "/health", "GET, HEAD, OPTIONS"),
    ("POST", "/v1/models", "GET, HEAD, OPTIONS"),
])
def test_wrong_method_on_known_route_is_405_with_allow(server, method, path, allow):
    st, headers, data = call(server, method, path, body=b"{}" if method != "GET" else None)
    assert st == 405, (st, data[:200])
    assert headers["Allow"] == allow
    err = assert_openai_error(data, 405)
    assert method in err["message"] and path in err["message"]
    assert server.healthy()


@needs_model
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_unknown_route_stays_404(server, method):
    st, headers, data = call(server, method, "/v1/nothing", body=b"{}" if method != "GET" else None)
    assert st == 404 and "Allow" not in headers
    assert_openai_error(data, 404)


def preflight(server, path, method, req_headers=None, origin="http://app.example"):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if req_headers:
        h["Access-Control-Request-Headers"] = req_headers
    return call(server, "OPTIONS", path, headers=h)


@needs_model
def test_cors_preflight_echoes_requested_headers_and_allows_route_method(server):
    st, h, _ = preflight(server, CHAT, "POST",
                         "authorization, content-type, x-stainless-os, x-stainless-lang")
    assert st == 204
    assert h["Access-Control-Allow-Origin"] == "*"
    assert h["Access-Control-Allow-Headers"] == \
        "authorization, content-type, x-stainless-os, x-stainless-lang"
    assert h["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    # Without requested headers: the ones the API uses.
    st, h, _ = preflight(server, "/v1/models", "GET")
    assert st == 204 and h["Access-Control-Allow-Methods"] == "GET, HEAD, OPTIONS"
    assert h["Access-Control-Allow-Headers"] == \
        "Authorization, Content-Type, x-api-key, anthropic-version"


@needs_model
def test_cors_preflight_refuses_method_the_route_lacks(server):
    st, h, _ = preflight(server, CHAT, "DELETE")
    assert st == 204
    assert "Access-Control-Allow-Methods" not in h
    assert h["Allow"] == "POST, OPTIONS"


@needs_model
def test_cors_origin_default_star_on_every_response(server):
    for method, path, body in (("GET", "/health", None), ("GET", "/nothing", None),
                               ("POST", CHAT, b"{")):
        st, h, _ = call(server, method, path, body=body, headers={"Origin": "http://x.example"})
        assert h["Access-Control-Allow-Origin"] == "*", (method, path, st)


@needs_model
def test_cors_origin_flag_answers_only_that_origin_with_vary(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1,
                    "--cors-origin", "https://ui.example:3000")
    st, h, _ = preflight(s, CHAT, "POST", "content-type", origin="https://ui.example:3000")
    assert st == 204
    assert h["Access-Control-Allow-Origin"] == "https://ui.example:3000"
    assert h["Vary"] == "Origin"
    st, h, _ = preflight(s, CHAT, "POST", "content-type", origin="https://evil.example")
    assert "Access-Control-Allow-Origin" not in h and h["Vary"] == "Origin"
    st, h, data = call(s, "POST", COMP, body=json.dumps({"prompt": "hi", "max_tokens": 1}).encode(),
                       headers={"Origin": "https://ui.example:3000"})
    assert st == 200 and h["Access-Control-Allow-Origin"] == "https://ui.example:3000"
    st, h, data = call(s, "GET", "/health", headers={"Origin": "https://other.example"})
    assert st == 200 and "Access-Control-Allow-Origin" not in h


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


BIG = 20 << 20  # bytes sent, against a 1 MiB limit
PIECE = b'{"messages": "' + b"x" * (64 << 10)


def chunks(total):
    sent = 0
    while sent < total:
        yield PIECE
        sent += len(PIECE)


@needs_model
def test_chunked_body_past_max_body_is_413_and_not_buffered(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "--max-body", 1 << 20)
    # Warm: connection threads start on demand (a sanitizer build's thread costs MiBs),
    # so two connections at once first, then the baseline.
    warm = [conn(s), conn(s)]
    for w in warm:
        w.request("GET", "/health")
    for w in warm:
        w.getresponse().read()
        w.close()
    # The same refusal once with a small body: a sanitizer build maps its fake stacks
    # (detect_stack_use_after_return) as code paths are first run, which is no buffering.
    w = conn(s)
    w.request("POST", CHAT, body=chunks(2 << 20), encode_chunked=True,
              headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    assert w.getresponse().status == 413
    w.close()
    assert s.healthy()
    before = rss_kib(s.proc.pid)
    c = conn(s)
    c.request("POST", CHAT, body=chunks(BIG), encode_chunked=True,
              headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    r = c.getresponse()
    data = r.read()
    assert r.status == 413, data[:200]
    err = assert_openai_error(data, 413)
    assert "1048576" in err["message"]
    assert r.headers["Connection"] == "close"
    grown = rss_kib(s.proc.pid) - before
    # Buffering the body would add its 20 MiB; the bar leaves room for allocator noise.
    assert grown < 8 << 10, f"RSS grew by {grown} KiB for a {BIG >> 20} MiB body"
    # The server goes on serving; the rest of the body was never parsed as requests.
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1})
    assert st == 200 and body["usage"]["completion_tokens"] == 1
    time.sleep(0.2)
    lines = [ln for ln in s.stderr().splitlines() if ln.startswith("[server] ")]
    assert any(" /v1/chat/completions 413 " in ln for ln in lines), lines
    assert not any(" 400 " in ln or ln.startswith("[server]   ") for ln in lines), lines


@needs_model
def test_body_limit_answers_before_the_body_is_sent(make_server):
    """Raw socket: the client sends chunks until the server answers. The 413 arrives
    while most of the 20 MiB is still unsent, for a chunked and for a sized body."""
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "--max-body", 1 << 20)
    u = urllib.parse.urlparse(s.url)
    for framing in ("chunked", "sized"):
        sock = socket.create_connection((u.hostname, u.port), timeout=30)
        head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += ("Transfer-Encoding: chunked\r\n" if framing == "chunked"
                 else f"Content-Length: {BIG}\r\n")
        sock.sendall((head + "\r\n").encode())
        sent, reply = 0, b""
        sock.setblocking(False)
        while sent < BIG:
            try:
                reply += sock.recv(65536)
                if b"\r\n\r\n" in reply:
                    break
            except BlockingIOError:
                pass
            piece = (f"{len(PIECE):x}\r\n".encode() + PIECE + b"\r\n"
                     if framing == "chunked" else PIECE)
            try:
                sent += sock.send(piece)
            except BlockingIOError:
                time.sleep(0.005)
        sock.setblocking(True)
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 413 "), (framing, reply[:100])
        assert sent < BIG // 2, (framing, sent)
        sock.close()
    assert s.healthy()


@needs_model
def test_sized_body_past_max_body_is_413(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "--max-body", 4096)
    st, _ = s.post(COMP, {"prompt": "hi", "max_tokens": 1, "pad": "x" * 3000})
    assert st == 200
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1, "pad": "x" * 5000})
    assert st == 413 and body["error"]["code"] == 413
    st, body = s.post("/tokenize", {"content": "y" * 5000})
    assert st == 413
    assert s.healthy()


@needs_model
def test_body_sent_to_a_route_without_body_is_answered_unread(server):
    c = conn(server)
    c.request("PUT", "/v1/nothing", body=chunks(4 << 20), encode_chunked=True,
              headers={"Transfer-Encoding": "chunked"})
    r = c.getresponse()
    assert r.status == 404
    assert_openai_error(r.read(), 404)
    assert server.healthy()


@needs_model
def test_client_gone_mid_stream_is_logged_499_with_token_counts(make_server):
    s = make_server("--slots", 1, "--n-ctx", 512, "-t", 1)
    c = conn(s)
    c.request("POST", COMP, body=json.dumps({
        "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True,
        "temperature": 0, "stream": True}).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    seen = 0
    while seen < 5:  # a few tokens, then leave
        if r.fp.readline().startswith(b"data: {"):
            seen += 1
    r.fp.close()
    c.sock.close()
    t0 = time.time()
    line = None
    while line is None and time.time() - t0 < 20:
        line = next((ln for ln in s.stderr().splitlines() if "POST /v1/completions" in ln), None)
        time.sleep(0.05)
    assert line is not None, s.stderr()
    assert " 499 prompt=" in line, line
    completion = int(line.split("completion=")[1].split()[0])
    assert 5 <= completion < 400, line
    # The slot was freed: the cancel is counted and a new request runs.
    s.wait_metric("minfer_requests_cancelled_total", lambda v: v == 1)
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 2})
    assert st == 200 and body["usage"]["completion_tokens"] == 2


@needs_model
def test_serve_takes_llama_server_engine_flags_with_notices(make_server):
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "-ngl", 99, "-fa", "on", "--mlock",
                    "--no-mmap", "--metrics")
    log = s.stderr()
    assert "notice: -ngl 99: this build has no GPU backend" in log
    assert "notice: -fa: ignored" in log
    assert "notice: --no-mmap: ignored" in log
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1})
    assert st == 200 and body["usage"]["completion_tokens"] == 1
    assert "minfer_requests_total" in s.metrics()


@needs_model
def test_api_key_file_first_line_is_the_key(make_server, tmp_path):
    key = tmp_path / "key"
    key.write_text("sekret-from-file\r\nnot the key\n")
    s = make_server("--slots", 1, "--n-ctx", 256, "-t", 1, "--api-key-file", key)
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1})
    assert st == 401
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1},
                      headers={"Authorization": "Bearer not the key"})
    assert st == 401
    st, body = s.post(COMP, {"prompt": "hi", "max_tokens": 1},
                      headers={"Authorization": "Bearer sekret-from-file"})
    assert st == 200


@needs_model
@pytest.mark.parametrize("content,extra,message", [
    ("\nkey on line two\n", [], "the first line is empty"),
    ("k\n", ["--api-key", "x"], "not both"),
    (None, [], "missing"),
])
def test_api_key_file_errors_exit_1(tmp_path, content, extra, message):
    import subprocess
    from conftest import BIN, MODEL
    key = tmp_path / "key"
    if content is not None:
        key.write_text(content)
    r = subprocess.run([BIN, "serve", str(MODEL), "--port", "0", "--api-key-file", str(key), *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert message in r.stderr or (message == "missing" and str(key) in r.stderr), r.stderr


@needs_model
def test_ctx_size_is_llama_servers_total_split_across_slots(make_server):
    # -c 1024 with 4 slots: 256 positions per request (llama-server's -c), an arena of 1024.
    s = make_server("--slots", 4, "-c", 1024, "-t", 1)
    st, body = s.request("GET", "/props")
    assert st == 200 and json.loads(body)["default_generation_settings"]["n_ctx"] == 256
    st, body = s.request("GET", "/slots")
    assert st == 200 and [x["n_ctx"] for x in json.loads(body)] == [256] * 4
    # 300 prompt tokens do not fit one request's 256 positions: a 400 naming the context.
    st, body = s.post(COMP, {"prompt": [1] * 300, "max_tokens": 1})
    assert st == 400 and "a request may use 256 positions" in body["error"]["message"], body
    st, body = s.post(COMP, {"prompt": [1] * 200, "max_tokens": 1})
    assert st == 200 and body["usage"]["prompt_tokens"] == 200


@needs_model
@pytest.mark.parametrize("flags,message", [
    (["-c", "1024", "--n-ctx", "256"], "not both"),
    (["-c", "6", "--slots", "4"], "leaves 1 positions per request; give at least 8"),
    (["--ctx-size", "999999", "--slots", "2"], "past the model's context length"),
])
def test_ctx_size_errors_exit_1(flags, message):
    import subprocess
    from conftest import BIN, MODEL
    r = subprocess.run([BIN, "serve", str(MODEL), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert message in r.stderr, r.stderr


def parse_prometheus(text):
    """name{labels} -> value, by hand (the text format's sample lines)."""
    out, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out, types


@needs_model
def test_vllm_named_metrics_match_usage(make_server):
    s = make_server("--slots", 2, "--n-ctx", 256, "-t", 1)
    reasons, prompt, gen = [], 0, 0
    for body in ({"prompt": "Once upon a time", "max_tokens": 3, "ignore_eos": True},
                 {"prompt": "The capital of France is", "max_tokens": 40, "stop": [" "],
                  "temperature": 0}):
        st, r = s.post(COMP, body)
        assert st == 200
        reasons.append(r["choices"][0]["finish_reason"])
        prompt += r["usage"]["prompt_tokens"]
        gen += r["usage"]["completion_tokens"]
    assert reasons[0] == "length"
    st, data = s.request("GET", "/metrics")
    m, types = parse_prometheus(data.decode())
    assert types["vllm:num_requests_running"] == "gauge"
    assert types["vllm:request_success_total"] == "counter"
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert m["vllm:prompt_tokens_total"] == prompt
    assert m["vllm:generation_tokens_total"] == gen
    for reason in ("stop", "length"):
        assert m[f'vllm:request_success_total{{finished_reason="{reason}"}}'] == \
            reasons.count(reason), (reason, reasons)
    usage = m["vllm:kv_cache_usage_perc"]
    assert 0 < usage <= 1
    assert usage == pytest.approx(m["minfer_kv_cells_used"] / m["minfer_kv_cells_total"])
    assert m['vllm:cache_config_info{block_size="1",num_gpu_blocks="%d"}'
             % m["minfer_kv_cells_total"]] == 1
    # Latency histograms: cumulative buckets, +Inf equal to _count, a positive sum; one
    # first token per request, one gap per later token, one end per completed request.
    counts = {"vllm:time_to_first_token_seconds": 2,
              "vllm:inter_token_latency_seconds": gen - 2,
              "vllm:e2e_request_latency_seconds": 2}
    for name, count in counts.items():
        assert types[name] == "histogram"
        buckets = [(k, v) for k, v in m.items() if k.startswith(name + "_bucket{")]
        values = [v for _, v in buckets]
        assert values == sorted(values), buckets
        assert buckets[-1][0] == name + '_bucket{le="+Inf"}'
        assert m[name + "_count"] == values[-1] == count, (name, m[name + "_count"], count)
        assert m[name + "_sum"] > 0
    # The end of a request comes after its first token.
    assert m["vllm:e2e_request_latency_seconds_sum"] >= m["vllm:time_to_first_token_seconds_sum"]


@needs_model
def test_health_answers_while_hundreds_of_idle_and_slow_clients_hold_connections(make_server):
    # 200 sockets, each holding a connection: half idle after their request line, half
    # sending a header line every 0.3 s (slowloris). /health must be answered at once
    # while they are open. With the fixed pool this replaced (84 threads; 32 with these
    # flags) it waited until the 5 s read timeout ended idle sockets and freed a
    # thread, so the 2 s bar separates the two with room for a sanitizer build.
    s = make_server("--slots", 1, "--max-queue", 4, "-t", 1)
    host, port = urllib.parse.urlsplit(s.url).netloc.split(":")
    socks = []
    try:
        for _ in range(200):
            c = socket.create_connection((host, int(port)), timeout=5)
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(c)
        worst = 0.0
        for round_ in range(4):
            ended = 0
            for c in socks[100:]:
                try:
                    c.sendall(f"X-Slow-{round_}: y\r\n".encode())
                except OSError:  # the server ended a dribbling request
                    ended += 1
            assert ended < 40, ended  # most of them still hold their connection
            t0 = time.time()
            status, body = s.request("GET", "/health", timeout=10)
            worst = max(worst, time.time() - t0)
            assert status == 200 and json.loads(body) == {"status": "ok"}
            time.sleep(0.3)
        assert worst < 2.0, worst
    finally:
        for c in socks:
            c.close()
    assert s.healthy()


@needs_model
def test_max_connections_caps_the_connection_threads(make_server):
    s = make_server("--slots", 1, "--max-connections", 8, "-t", 1)
    host, port = urllib.parse.urlsplit(s.url).netloc.split(":")
    threads = lambda: len(list(__import__("pathlib").Path(f"/proc/{s.proc.pid}/task").iterdir()))
    base = threads()
    socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(40)]
    try:
        for c in socks:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        time.sleep(1.0)
        # 8 connection threads and the 4 that answer connections past the cap
        # (GrowingPool::kOverflowThreads); the other 28 wait.
        assert threads() - base <= 8 + 4
    finally:
        for c in socks:
            c.close()
    time.sleep(0.5)
    assert s.healthy()
