"""The model cache: `minfer pull hf:REPO[:QUANT]` (and any command given an hf: model)
against a real HTTP server on loopback that serves the Hugging Face layout
(GET /api/models/REPO/tree/main, GET /REPO/resolve/main/FILE with Range support), and
`minfer list` / `minfer rm`. A resumed download sends a Range request and ends with the
same bytes; a truncated download, a wrong sha256 and a full disk (a 1 MiB tmpfs, where
mounting one is allowed) end in a clear error with no file in the models folder."""
import hashlib
import http.server
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cache_env import loopback, models, run

TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", "tests/data"))
SRC = TESTDATA / "vocab" / "ggml-vocab-llama-spm.gguf"  # a real GGUF (no tensors), 707 KiB
SRC2 = TESTDATA / "vocab" / "ggml-vocab-phi-3.gguf"


class Repo:
    def __init__(self):
        self.files = {}        # repo path -> bytes
        self.bad_sha = set()   # paths listed with a wrong sha256
        self.truncate = {}     # path -> bytes to send before closing
        self.ranges = []       # Range headers received


def make_handler(repos):
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            parts = self.path.split("/")
            if self.path.startswith("/api/models/") and self.path.endswith("/tree/main"):
                repo = "/".join(parts[3:5])
                if repo not in repos:
                    return self.send_error(404)
                r = repos[repo]
                listing = [{"type": "file", "path": p, "size": len(b),
                            "lfs": {"oid": ("0" * 64 if p in r.bad_sha
                                            else hashlib.sha256(b).hexdigest()),
                                    "size": len(b)}}
                           for p, b in r.files.items()]
                listing.append({"type": "file", "path": "README.md", "size": 5})
                body = json.dumps(listing).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return self.wfile.write(body)
            # /OWNER/NAME/resolve/main/FILE
            repo, file = "/".join(parts[1:3]), "/".join(parts[5:])
            if repo not in repos or file not in repos[repo].files or parts[3:5] != ["resolve", "main"]:
                return self.send_error(404)
            r = repos[repo]
            data = r.files[file]
            start = 0
            rng = self.headers.get("Range")
            if rng:
                r.ranges.append(rng)
                start = int(rng.split("=")[1].split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            body = data[start:]
            if file in r.truncate:
                body = body[: r.truncate.pop(file)]
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)
    return H


@pytest.fixture
def hub(tmp_path):
    repos = {}
    with loopback(make_handler(repos), tmp_path, MINFER_HF_ENDPOINT="{url}") as (_, cache, env):
        yield repos, cache, env


def test_pull_picks_the_quant_and_list_and_rm_manage_it(hub):
    repos, cache, env = hub
    r = Repo()
    r.files = {"tiny-Q4_K_M.gguf": SRC.read_bytes(), "tiny-Q8_0.gguf": SRC2.read_bytes()}
    repos["test/tiny"] = r
    res = run(env, "pull", "hf:test/tiny:q8_0")
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()) == cache / "models" / "tiny-Q8_0.gguf"
    assert (cache / "models" / "tiny-Q8_0.gguf").read_bytes() == SRC2.read_bytes()
    # two models and no QUANT: the choices are named
    res = run(env, "pull", "hf:test/tiny")
    assert res.returncode == 1 and "tiny-Q4_K_M.gguf" in res.stderr and "hf:test/tiny:QUANT" in res.stderr
    res = run(env, "list")
    assert res.returncode == 0 and "tiny-Q8_0.gguf" in res.stdout and "phi3" in res.stdout
    res = run(env, "rm", "tiny-Q8_0")
    assert res.returncode == 0, res.stderr
    assert models(cache) == []
    res = run(env, "rm", "tiny-Q8_0")
    assert res.returncode == 1 and "not in the model cache" in res.stderr


def test_a_command_resolves_an_hf_model_and_downloads_every_part(hub):
    repos, cache, env = hub
    r = Repo()
    r.files = {"m-00001-of-00002.gguf": SRC.read_bytes(), "m-00002-of-00002.gguf": SRC2.read_bytes()}
    repos["test/split"] = r
    res = run(env, "tokenize", "hf:test/split", "hello", "--ids")
    # every part is fetched, then the command runs on the first (these parts carry no
    # split keys, so the first opens alone: a vocabulary GGUF that tokenizes)
    assert models(cache) == ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() and all(t.isdigit() for t in res.stdout.split())
    # cached now: a second run downloads nothing
    res = run(env, "tokenize", "hf:test/split", "hello", "--ids")
    assert res.returncode == 0 and "->" not in res.stderr


def test_an_interrupted_download_resumes_with_a_range_request(hub):
    repos, cache, env = hub
    r = Repo()
    data = SRC.read_bytes()
    r.files = {"tiny-Q8_0.gguf": data}
    r.truncate = {"tiny-Q8_0.gguf": 300000}
    repos["test/tiny"] = r
    res = run(env, "pull", "hf:test/tiny")
    assert res.returncode == 1 and "run again to resume" in res.stderr, res.stderr
    assert models(cache) == []  # no half file in the models folder
    assert (cache / "dl" / "tiny-Q8_0.gguf.part").stat().st_size == 300000
    res = run(env, "pull", "hf:test/tiny")
    assert res.returncode == 0, res.stderr
    assert r.ranges == ["bytes=300000-"]
    assert (cache / "models" / "tiny-Q8_0.gguf").read_bytes() == data
    assert not (cache / "dl" / "tiny-Q8_0.gguf.part").exists()


def test_a_wrong_sha256_is_an_error_and_leaves_nothing(hub):
    repos, cache, env = hub
    r = Repo()
    r.files = {"tiny-Q8_0.gguf": SRC.read_bytes()}
    r.bad_sha = {"tiny-Q8_0.gguf"}
    repos["test/tiny"] = r
    res = run(env, "pull", "hf:test/tiny")
    assert res.returncode == 1 and "sha256" in res.stderr and "removed" in res.stderr
    assert models(cache) == [] and not list((cache / "dl").glob("*"))


def test_unknown_repo_and_bad_reference_are_clear_errors(hub):
    repos, cache, env = hub
    res = run(env, "pull", "hf:test/none")
    assert res.returncode == 1 and "HTTP 404" in res.stderr
    res = run(env, "pull", "hf:a/b/c")
    assert res.returncode == 1 and "is not hf:OWNER/REPO" in res.stderr
    env2 = dict(env, MINFER_HF_ENDPOINT="http://127.0.0.1:9")
    res = run(env2, "pull", "hf:test/tiny")
    assert res.returncode == 1 and "cannot reach" in res.stderr


def test_a_full_disk_is_an_error_and_leaves_nothing(hub, tmp_path):
    repos, cache, env = hub
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        r = Repo()
        r.files = {"tiny-Q8_0.gguf": SRC.read_bytes()}  # 707 KiB > 256 KiB
        repos["test/tiny"] = r
        env = dict(env, MINFER_CACHE=str(small))
        res = run(env, "pull", "hf:test/tiny")
        assert res.returncode == 1 and "No space left on device" in res.stderr, res.stderr
        assert models(small) == [] and not list((small / "dl").glob("*"))
    finally:
        subprocess.run(["umount", str(small)])
