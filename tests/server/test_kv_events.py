"""Stage 17 tests: `minfer serve --kv-events` against a real ZMQ subscriber (pyzmq) and the
real SmolLM2 model. Bars: the block set rebuilt from the events alone equals, after
every request, the set this file recomputes from the conversations' token ids with the
documented hash (XXH3-64, seed 0x6d696e666572, parent u64 LE + token ids u32 LE) for the
slots the admission policy leaves holding them, and its size equals /metrics
minfer_kv_blocks; every BlockStored's hashes recompute from its parent and token_ids; a
hash is never stored while present nor removed while absent; sequence numbers run from
0 without a gap; a cancelled stream's blocks (prompt and decoded) are removed while a
completed request's stay; a subscriber joining late rebuilds the same set from the
replay socket; bad endpoints are clear startup errors; without --kv-events /metrics has
no KV event lines."""
import http.client
import json
import random
import socket
import struct
import subprocess
import threading
import time

import pytest

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")
xxhash = pytest.importorskip("xxhash")

from conftest import BIN, MODEL  # noqa: E402

SEED = 0x6D696E666572
BLOCK = 8
END_SEQ = b"\xff" * 8


def block_hash(parent, tokens):
    data = struct.pack("<Q", parent) + struct.pack(f"<{len(tokens)}i", *tokens)
    return xxhash.xxh3_64_intdigest(data, SEED)


def chain(tokens):
    """The hashes of the full blocks of `tokens` (a slot's cached tokens, position 0 first)."""
    out, parent = [], 0
    for b in range(len(tokens) // BLOCK):
        parent = block_hash(parent, tokens[b * BLOCK:(b + 1) * BLOCK])
        out.append(parent)
    return out


class Subscriber:
    """Rebuilds the publisher's block set from [topic, seq, payload] messages, checking the
    schema, the hash chain and the sequence numbers as it goes."""

    def __init__(self, ctx, endpoint):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.blocks = set()
        self.next_seq = None
        self.n_batches = 0
        self.n_removed = 0

    def apply(self, seq, payload):
        if self.next_seq is not None:
            assert seq == self.next_seq, f"sequence gap: expected {self.next_seq}, got {seq}"
        self.next_seq = seq + 1
        self.n_batches += 1
        ts, events, dp_rank = msgpack.unpackb(payload)
        assert isinstance(ts, float) and abs(ts - time.time()) < 600
        assert dp_rank == 0
        for ev in events:
            assert isinstance(ev, dict), ev
            tag = ev["type"]
            if tag == "BlockStored":
                assert list(ev) == ["type", "block_hashes", "parent_block_hash", "token_ids",
                                    "block_size", "lora_id", "medium", "lora_name"], ev
                hashes, parent, token_ids = ev["block_hashes"], ev["parent_block_hash"], ev["token_ids"]
                assert ev["block_size"] == BLOCK
                assert ev["lora_id"] is None and ev["medium"] is None and ev["lora_name"] is None
                assert len(token_ids) == BLOCK * len(hashes)
                p = 0 if parent is None else parent
                for i, h in enumerate(hashes):
                    p = block_hash(p, token_ids[i * BLOCK:(i + 1) * BLOCK])
                    assert h == p, f"BlockStored hash {i} does not recompute from its parent and tokens"
                    assert h not in self.blocks, "stored a block already present"
                    self.blocks.add(h)
            elif tag == "BlockRemoved":
                assert list(ev) == ["type", "block_hashes", "medium"] and ev["medium"] is None, ev
                self.n_removed += len(ev["block_hashes"])
                for h in ev["block_hashes"]:
                    assert h in self.blocks, "removed a block not present"
                    self.blocks.remove(h)
            elif tag == "AllBlocksCleared":
                assert ev == {"type": "AllBlocksCleared"}
                self.blocks.clear()
            else:
                raise AssertionError(f"unknown event {ev!r}")

    def drain_until(self, pred, timeout_s=30):
        """Applies batches until pred() holds. drain() would not return while a generation
        stores a block more often than its 50 ms quiet gap (a fast CPU: 8 tokens < 50 ms)."""
        t0 = time.time()
        while not pred():
            assert time.time() - t0 < timeout_s, "the condition never held"
            if self.sock.poll(50):
                topic, seq, payload = self.sock.recv_multipart()
                assert topic == b"" and len(seq) == 8
                self.apply(int.from_bytes(seq, "big"), payload)

    def drain(self, timeout_ms=50):
        while self.sock.poll(timeout_ms):
            topic, seq, payload = self.sock.recv_multipart()
            assert topic == b"" and len(seq) == 8
            self.apply(int.from_bytes(seq, "big"), payload)


def replay(ctx, endpoint, start):
    """Batches from `start` on, through a DEALER (vLLM's request: [b"", seq 8 bytes BE])."""
    d = ctx.socket(zmq.DEALER)
    d.connect(endpoint)
    d.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        assert d.poll(5000), "the replay socket did not answer"
        empty, seq, payload = d.recv_multipart()
        assert empty == b""
        if seq == END_SEQ:
            assert payload == b""
            break
        out.append((int.from_bytes(seq, "big"), payload))
    d.close(0)
    return out


def settle(server, sub, expected=None, timeout_s=10):
    """Reads events until the subscriber's set equals `expected` (and the gauge), or fails."""
    t0 = time.time()
    while True:
        sub.drain()
        gauge = server.metrics()["minfer_kv_blocks"]
        if len(sub.blocks) == gauge and (expected is None or sub.blocks == expected):
            return
        if time.time() - t0 > timeout_s:
            missing = None if expected is None else len(expected - sub.blocks)
            extra = None if expected is None else len(sub.blocks - expected)
            raise AssertionError(f"subscriber holds {len(sub.blocks)} blocks, gauge {gauge}, "
                                 f"missing {missing}, extra {extra}")


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def start(make_server, tmp_path, *extra):
    pub = f"ipc://{tmp_path}/kv.ipc"
    rep = f"ipc://{tmp_path}/kv-replay.ipc"
    s = make_server("--slots", 2, "--n-ctx", 512, "-t", 2, "--kv-events", pub,
                    "--kv-events-replay", rep, "--kv-block-size", BLOCK, *extra)
    return s, pub, rep


def complete(server, prompt, max_tokens=1):
    status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                   "temperature": 0})
    assert status == 200, body
    return body


def test_events_rebuild_exactly_the_blocks_of_multiturn_conversations_with_evictions(
        make_server, tmp_path, zctx):
    server, pub, rep = start(make_server, tmp_path)
    sub = Subscriber(zctx, pub)
    time.sleep(0.3)  # the SUB connection; what it missed comes from the replay socket
    sub.drain()
    missed = replay(zctx, rep, 0)
    if sub.next_seq is None:
        # Nothing arrived live: the replay is the whole story so far (AllBlocksCleared).
        for seq, payload in missed:
            sub.apply(seq, payload)
    assert missed and missed[0][0] == 0 and msgpack.unpackb(missed[0][1])[1] == [{"type": "AllBlocksCleared"}]

    rng = random.Random(7)
    system = [rng.randrange(1000, 40000) for _ in range(21)]  # shared by every conversation
    convs = {name: list(system) for name in "ABC"}  # three conversations, two slots
    slots = [{"tokens": [], "last": 0} for _ in range(2)]  # the admission policy, mirrored
    tick = 0
    for turn in range(3):
        for name in "ABC":
            convs[name] += [rng.randrange(1000, 40000) for _ in range(rng.randrange(5, 19))]
            prompt = convs[name]

            def common(s):
                n = 0
                while n < min(len(s["tokens"]), len(prompt)) and s["tokens"][n] == prompt[n]:
                    n += 1
                return n

            # The free slot with the longest cached prefix; then an empty one; then LRU.
            target = max(slots, key=lambda s: (common(s), not s["tokens"], -s["last"]))
            tick += 1
            target["tokens"], target["last"] = list(prompt), tick
            body = complete(server, prompt)
            assert body["usage"]["prompt_tokens"] == len(prompt)
            expected = set()
            for s in slots:
                expected |= set(chain(s["tokens"]))
            settle(server, sub, expected)
    m = server.metrics()
    assert m["minfer_kv_events_dropped_total"] == 0
    # The hash a router must use, as /metrics states it.
    assert m['minfer_kv_events_info{block_size="8",hash="xxh3_64",seed="0x6d696e666572",'
             'layout="parent_u64le+tokens_u32le"}'] == 1
    # Evictions happened (three conversations in two slots) and were published; the
    # system prompt's two full blocks stayed, shared.
    assert sub.n_removed >= 10, sub.n_removed
    assert set(chain(system)) <= sub.blocks and len(chain(system)) == 2


def test_shared_prefix_of_a_running_request_is_published_once(make_server, tmp_path, zctx):
    server, pub, rep = start(make_server, tmp_path)
    sub = Subscriber(zctx, pub)
    time.sleep(0.3)
    rng = random.Random(11)
    prefix = [rng.randrange(1000, 40000) for _ in range(64)]
    long_done = threading.Event()

    def long_request():
        complete(server, prefix, max_tokens=120)
        long_done.set()

    t = threading.Thread(target=long_request)
    t.start()
    server.wait_metric("minfer_kv_blocks", lambda v: v >= len(prefix) // BLOCK)
    # The other slot takes the same 64 tokens plus more: its first 63 come from the running
    # sequence (copy-on-write), and the 7 shared full blocks are not announced again.
    body = complete(server, prefix + [rng.randrange(1000, 40000) for _ in range(30)], max_tokens=4)
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == len(prefix)
    t.join(120)
    assert long_done.is_set()
    settle(server, sub)
    # Both slots' prompt blocks are held; the decoded blocks recompute (checked on arrival).
    assert set(chain(prefix)) <= sub.blocks
    assert server.metrics()["minfer_kv_cells_shared"] > 0


def test_cancelled_request_removes_its_blocks_and_completed_one_keeps_them(
        make_server, tmp_path, zctx):
    # A context long enough that the leaving stream cannot finish before its client goes.
    server, pub, rep = start(make_server, tmp_path, "--n-ctx", 4096)
    sub = Subscriber(zctx, pub)
    time.sleep(0.3)
    rng = random.Random(19)
    kept = [rng.randrange(1000, 40000) for _ in range(40)]
    complete(server, kept)
    settle(server, sub, set(chain(kept)))
    # A stream whose client leaves: cancelled, its cells freed, its blocks (prompt and
    # the decoded ones) removed; the completed request's cache stays.
    gone = [rng.randrange(1000, 40000) for _ in range(50)]
    c = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({
        "prompt": gone, "max_tokens": 4000, "ignore_eos": True, "temperature": 0,
        "stream": True}).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    seen = 0
    while seen < 24:  # past the prompt's partial block: a decoded block is stored
        if r.fp.readline().startswith(b"data: {"):
            seen += 1
    sub.drain_until(lambda: set(chain(gone)) <= sub.blocks
                    and len(sub.blocks) > len(chain(kept) + chain(gone)))
    r.fp.close()
    c.sock.close()
    server.wait_metric("minfer_requests_cancelled_total", lambda v: v == 1)
    settle(server, sub, set(chain(kept)))


def test_slot_erase_and_restore_are_published(make_server, tmp_path, zctx):
    """POST /slots/{id}?action=erase drops the slot's blocks from the published set;
    restoring the saved file (the inference thread imports the cells) publishes them again."""
    save_dir = tmp_path / "slots"
    save_dir.mkdir()
    server, pub, rep = start(make_server, tmp_path, "--slot-save-path", save_dir)
    sub = Subscriber(zctx, pub)
    time.sleep(0.3)
    rng = random.Random(23)
    prompt = [rng.randrange(1000, 40000) for _ in range(40)]
    complete(server, prompt)
    settle(server, sub, set(chain(prompt)))
    status, raw = server.request("GET", "/slots")
    assert status == 200
    held = [s["id"] for s in json.loads(raw) if s["n_cached_tokens"] > 0]
    assert len(held) == 1, raw
    slot = held[0]
    status, body = server.post(f"/slots/{slot}?action=save", {"filename": "p.bin"})
    assert status == 200, body
    status, body = server.post(f"/slots/{slot}?action=erase", {})
    assert status == 200, body
    settle(server, sub, set())
    status, body = server.post(f"/slots/{slot}?action=restore", {"filename": "p.bin"})
    assert status == 200, body
    settle(server, sub, set(chain(prompt)))


def test_late_subscriber_replays_missed_batches_and_continues_live(make_server, tmp_path, zctx):
    server, pub, rep = start(make_server, tmp_path)
    early = Subscriber(zctx, pub)
    time.sleep(0.3)
    rng = random.Random(3)
    for n in (40, 50, 33):
        complete(server, [rng.randrange(1000, 40000) for _ in range(n)], max_tokens=3)
    settle(server, early)
    early.sock.close(0)  # a subscriber that goes away costs the server nothing
    complete(server, [rng.randrange(1000, 40000) for _ in range(45)], max_tokens=2)

    late = Subscriber(zctx, pub)
    time.sleep(0.3)
    batches = replay(zctx, rep, 0)
    assert [seq for seq, _ in batches] == list(range(len(batches)))
    for seq, payload in batches:
        late.apply(seq, payload)
    assert len(late.blocks) == server.metrics()["minfer_kv_blocks"]
    # A replay from the middle starts there.
    assert [seq for seq, _ in replay(zctx, rep, 2)] == list(range(2, len(batches)))
    # Live batches continue the replayed numbering (the replayed ones that also came live
    # are skipped).
    complete(server, [rng.randrange(1000, 40000) for _ in range(60)], max_tokens=2)
    t0 = time.time()
    while time.time() - t0 < 10:
        if not late.sock.poll(100):
            continue
        _, seq, payload = late.sock.recv_multipart()
        seq = int.from_bytes(seq, "big")
        if seq >= late.next_seq:
            late.apply(seq, payload)
        if len(late.blocks) == server.metrics()["minfer_kv_blocks"] and late.next_seq > len(batches):
            break
    assert late.next_seq > len(batches)
    settle(server, late)
    assert server.healthy()


def test_bad_kv_event_endpoints_are_clear_startup_errors(tmp_path):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")

    def refused(*args):
        p = subprocess.run([BIN, "serve", str(MODEL), "--port", "0", "-t", "1", *map(str, args)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0
        return p.stderr

    assert "--kv-events 'nonsense://x': cannot connect" in refused("--kv-events", "nonsense://x")
    with socket.socket() as busy:  # a port someone else listens on
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = f"tcp://127.0.0.1:{busy.getsockname()[1]}"
        err = refused("--kv-events", f"ipc://{tmp_path}/k.ipc", "--kv-events-replay", taken)
    assert f"--kv-events-replay '{taken}': cannot bind: Address already in use" in err
    assert "--kv-events-replay and --kv-events-topic need --kv-events" in refused(
        "--kv-events-replay", f"ipc://{tmp_path}/r.ipc")
    assert "--kv-block-size" in refused("--kv-events", f"ipc://{tmp_path}/k.ipc", "--kv-block-size", 0)


def test_without_kv_events_metrics_has_no_kv_event_lines(make_server):
    server = make_server("--slots", 1, "--n-ctx", 256, "-t", 2)
    complete(server, [1000 + i for i in range(40)])
    m = server.metrics()
    assert "minfer_kv_cells_used" in m
    assert not [k for k in m if k.startswith("minfer_kv_blocks") or k.startswith("minfer_kv_events")]
