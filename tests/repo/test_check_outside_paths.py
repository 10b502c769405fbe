"""Tests of check_outside_paths.py on throw-away git repositories: a clean tree passes,
and each kind of reference to a path outside the tree, planted in one tracked file,
fails the check with that file and line named."""
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parent / "check_outside_paths.py"

CLEAN = {
    "README.md": "See [usage](docs/USAGE.md). Models: ~/.cache/minfer/models\n",
    "docs/USAGE.md": "Back to the [README](../README.md); /usr/include, /dev/null, /tmp/x.\n",
    "tests/a/a_test.cpp": '#include "../b/b.h"\n',
    "tests/b/b.h": "// header\n",
    "tests/CMakeLists.txt": 'set(D "${PROJECT_SOURCE_DIR}/tests/data")\n'
                            'set(C "$ENV{HOME}/.cache/minfer")\n',
    "scripts/run.sh": 'cd "$(dirname "$0")/.."\nM="$HOME/.cache/minfer/models"\n',
    "tools/x/gen.sh": 'ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"\n'
                      'ls ../../build/ci\n',
    "tests/golden/t.py": 'ROOT = Path(__file__).resolve().parents[2]\n'
                         'CACHE = Path.home() / ".cache" / "minfer"\n',
    ".gitignore": "build/\n",
    # verbatim data may hold anything
    "tests/data/vocab/v.txt": "../../../etc /home/alice ~/x\n",
    "tests/data/chat_template/t.json": '{"source": "/mnt/data"}\n',
}

BAD = [
    ("README.md", "Test data: ../shared/testdata\n"),
    ("docs/ARCHITECTURE.md", "Tests read `../shared/testdata` beside the checkout.\n"),
    ("docs/USAGE.md", "see ../../elsewhere/notes.md\n"),
    ("tests/CMakeLists.txt", 'set(D "${PROJECT_SOURCE_DIR}/../shared/testdata")\n'),
    ("tools/make.sh", 'TESTDATA="$ROOT/../shared/testdata"\n'),
    ("tests/golden/t2.py", 'TESTDATA = ROOT.parent / "shared" / "testdata"\n'),
    ("tests/x/t3.py", 'D = os.path.join(ROOT, "..", "shared")\n'),
    ("tests/golden/t4.py", 'UP = Path(__file__).resolve().parents[3]\n'),
    ("tests/golden/t5.py", 'UP = Path(__file__).parent.parent.parent.parent\n'),
    ("scripts/t.sh", 'cd "$(dirname "$0")/../.."\n'),
    ("tests/a/CMakeLists.txt", 'add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/../../../x)\n'),
    ("tools/t.sh", "cp /work/shared/testdata/vocab/x.gguf .\n"),
    ("tests/t.py", 'P = "/home/alice/models/x.gguf"\n'),
    ("docs/PERF.md", "Loading model: /root/.cache/minfer/models/x.gguf\n"),
    ("bench/b.sh", "LLAMA=~/src/llama.cpp/build/bin/llama-bench\n"),
    ("bench/b.py", 'LLAMA = Path.home() / "llama.cpp"\n'),
]


def make_repo(tmp_path, files):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "tests/data/vocab/v.gguf").write_bytes(b"GGUF\0../../x /home/a")
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    return tmp_path


def run_check(root):
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True,
                          text=True)


def test_clean_tree_passes(tmp_path):
    r = run_check(make_repo(tmp_path, CLEAN))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("rel,text", BAD, ids=[f"{r}:{t.strip()[:40]}" for r, t in BAD])
def test_planted_reference_fails(tmp_path, rel, text):
    files = dict(CLEAN)
    files[rel] = files.get(rel, "") + text
    r = run_check(make_repo(tmp_path, files))
    assert r.returncode == 1, f"not caught: {rel}: {text!r}\n{r.stdout}{r.stderr}"
    line = files[rel].count("\n")
    assert f"{rel}:{line}:" in r.stdout, r.stdout
    assert len(r.stdout.splitlines()) == 1, r.stdout  # nothing else in the clean tree


def test_untracked_file_is_not_read(tmp_path):
    root = make_repo(tmp_path, CLEAN)
    (root / "notes.txt").write_text("../shared/testdata\n")
    assert run_check(root).returncode == 0
