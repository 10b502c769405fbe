"""Stage 17 test fixtures: a real `minfer serve` on loopback (port 0: the server picks a
free port and prints it), the real SmolLM2 model, and small HTTP helpers. Every server
started here is killed at the end of its fixture, whatever the test did."""
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BIN = os.environ.get("MINFER_BIN", "build/apps/minfer/minfer")
CACHE = Path(os.environ.get("MINFER_CACHE_DIR", Path.home() / ".cache" / "minfer"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# The asan-ubsan pass (CTest sets MINFER_SANITIZE): timing bars there only catch gross stalls.
SANITIZE = os.environ.get("MINFER_SANITIZE", "0") in ("1", "ON", "TRUE", "true")

needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)")


class Server:
    """One `minfer serve` process; .url once it listens; stderr kept in a file."""

    def __init__(self, *args, model=MODEL, startup_s=120, command="serve"):
        self.log = tempfile.NamedTemporaryFile(prefix="minfer-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([BIN, command, str(model), "--port", "0", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url = None
        line_box = []

        def read_line():
            for line in self.proc.stdout:
                if "listening on http://" in line:
                    line_box.append(line)
                    return

        t = threading.Thread(target=read_line, daemon=True)
        t.start()
        t.join(startup_s)
        if not line_box:
            self.kill()
            raise RuntimeError(f"server did not start: {self.stderr()}")
        self.url = line_box[0].split("listening on ")[1].split()[0]

    def stderr(self):
        return Path(self.log.name).read_text(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        try:
            os.unlink(self.log.name)
        except OSError:
            pass

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)

    # --- HTTP helpers --------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, raw=None, timeout=120):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json"} if data is not None else {}
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path, body, **kw):
        status, data = self.request("POST", path, body, **kw)
        return status, json.loads(data)

    def metrics(self):
        status, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def healthy(self):
        status, data = self.request("GET", "/health")
        return status == 200 and json.loads(data) == {"status": "ok"}

    def wait_metric(self, name, pred, timeout_s=30):
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            m = self.metrics()
            if pred(m[name]):
                return m
            time.sleep(0.05)
        raise AssertionError(f"{name} never satisfied the condition: {self.metrics()[name]}")


@pytest.fixture(scope="module")
def server():
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
    s = Server("--slots", 4, "--n-ctx", 1024, "-t", 2)
    yield s
    s.kill()


@pytest.fixture
def make_server():
    started = []

    def make(*args, **kw):
        if not MODEL.exists():
            pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
        s = Server(*args, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.kill()
