"""A short run of the mixed load of test_soak.py — 300 completions (150 under ASan) from 8
clients beside 40 slowloris sockets, 5 leavers and 2 stalled readers — that the sanitizer
pass also makes: every well-behaved request whole, no descriptor left open, and the server
drains and exits 0 on SIGTERM (under ASan, LeakSanitizer runs at that exit and a leak fails
it)."""

import soak
from conftest import SANITIZE, needs_model

# Under ASan + UBSan 150 completions (each minutes of model runs there); the ci pass makes 300.
REQUESTS = 150 if SANITIZE else 300


@needs_model
def test_short_mixed_load_leaves_no_error_no_fd_and_exits_clean(make_server):
    s = make_server("--slots", 6, "--n-ctx", 512, "-t", 2, "--stream-timeout", 5)
    out = soak.run(s, requests=REQUESTS, clients=8, slowloris=40, leavers=5, stallers=2)
    assert out["errors"] == [], out["errors"][:10]
    assert out["done"] == REQUESTS and out["leaves"] == 5
    assert out["health_errors"] == 0
    assert out["fds_end"] <= out["fds0"], (out["fds0"], out["fds_end"])
    s.terminate()
    code = s.proc.wait(120)
    log = s.stderr()
    assert "LeakSanitizer" not in log and "AddressSanitizer" not in log, log[-4000:]
    assert code == 0, log[-2000:]
