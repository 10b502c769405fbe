"""The server under a long mixed load (label long, run alone): 5,000 completions from 32
well-behaved clients, streaming and not, while 300 slowloris sockets dribble header lines,
30 clients leave at random points and 5 streaming readers stop reading. Bars: no error for
the well-behaved clients, /health p99 under 100 ms throughout, RSS within 10 % from the end
of the first thousand requests to the end of the last, no descriptor left open, and a clean
drain on SIGTERM. The real SmolLM2 model on loopback."""
import soak
from conftest import needs_model


@needs_model
def test_5000_requests_beside_slowloris_leavers_and_stalled_readers(make_server):
    s = make_server("--slots", 8, "--n-ctx", 512, "-t", 2, "--stream-timeout", 10)
    out = soak.run(s, requests=5000, clients=32, slowloris=300, leavers=30, stallers=5)
    print(f"wall {out['wall_s']:.0f} s, rss {out['rss']} end {out['rss_end']} KiB, "
          f"health p50 {out['health_s'][len(out['health_s']) // 2] * 1e3:.1f} ms "
          f"p99 {soak.p99(out['health_s']) * 1e3:.1f} ms over {len(out['health_s'])}, "
          f"fds {out['fds0']} -> {out['fds_end']}, slowloris opened {out['slowloris_opened']}")
    assert out["errors"] == [], out["errors"][:10]
    assert out["done"] == 5000
    assert out["leaves"] == 30
    assert out["health_errors"] == 0
    assert soak.p99(out["health_s"]) < 0.100, out["health_s"][-20:]
    first, last = out["rss"][1000], out["rss"][5000]
    assert abs(last - first) <= 0.10 * first, out["rss"]
    assert out["fds_end"] <= out["fds0"], (out["fds0"], out["fds_end"])
    s.terminate()
    assert s.proc.wait(60) == 0, s.stderr()[-2000:]
