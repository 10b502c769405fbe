"""Stage 17 tests: deploy/kv_routing.py end to end — minfer replicas publishing KV events
and vllm-router's kv_aware policy consuming them. Bars: with the events every routed turn
of three multi-turn conversations lands on the replica holding its prefix, its whole
previous prompt taken from the cache (exit 0); without them (--control) some turn misses
(exit 1), so the check can fail. Skipped without vllm-router (PyPI vllm-router; found on
PATH, through MINFER_VLLM_ROUTER or in scripts/setup.sh's venv $MINFER_CACHE/routers)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, MODEL

from conftest import CACHE

# scripts/setup.sh installs the routers into the venv $MINFER_CACHE/routers.
_VENV_ROUTER = CACHE / "routers" / "bin" / "vllm-router"
ROUTER = (os.environ.get("MINFER_VLLM_ROUTER") or shutil.which("vllm-router")
          or (str(_VENV_ROUTER) if _VENV_ROUTER.exists() else None))
SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "kv_routing.py"

pytestmark = [
    pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} not present (scripts/setup.sh)"),
    pytest.mark.skipif(not ROUTER, reason="vllm-router not installed (pip install vllm-router; "
                                          "or set MINFER_VLLM_ROUTER)"),
]


def route(*extra):
    return subprocess.run([sys.executable, str(SCRIPT), "--minfer", BIN, "--model", str(MODEL),
                           "--router", ROUTER, "--replicas", "3", "--turns", "3", *extra],
                          capture_output=True, text=True, timeout=300)


def test_turns_land_on_the_replica_holding_their_prefix():
    p = route()
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(" ok") == 6, p.stdout


def test_without_events_the_router_misses_some_prefixes():
    p = route("--control")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "WRONG" in p.stdout
