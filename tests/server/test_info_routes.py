"""Stage 17 tests: the routes routers and llama-server clients call beside generation —
vLLM's /tokenize, /detokenize and /v1/chat/completions/render shapes, SGLang's info
routes, model ids (--served-model-name), X-Request-Id, /props and /slots, the HTTP/2
preface — on a real server on loopback (two slots, served as "smol" or "tiny")."""
import json
import socket
import time
import urllib.request

import pytest

from conftest import needs_model

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def srv():
    from conftest import MODEL, Server

    if not MODEL.exists():
        pytest.skip(f"{MODEL} not present (scripts/setup.sh)")
    s = Server("--slots", 2, "--n-ctx", 512, "-t", 2, "--served-model-name", "smol,tiny",
               "--served-model-name", "org/smol-v2")
    yield s
    s.kill()


def wait_log(srv, needle, timeout_s=10):
    t0 = time.time()
    while needle not in srv.stderr() and time.time() - t0 < timeout_s:
        time.sleep(0.05)
    return srv.stderr()


# --- 1. /tokenize and /detokenize: vLLM's shapes beside llama-server's ---------------------

@needs_model
def test_tokenize_vllm_prompt_shape_counts_and_token_strs(srv):
    st, llama = srv.post("/tokenize", {"content": "Hello world"})
    assert st == 200 and llama == {"tokens": [19556, 905]}  # llama-server's shape unchanged
    st, v = srv.post("/tokenize", {"model": "smol", "prompt": "Hello world",
                                   "return_token_strs": True})
    assert st == 200
    assert v == {"count": 2, "max_model_len": 512, "tokens": [19556, 905],
                 "token_strs": ["Hello", "\u0120world"]}
    st, v = srv.post("/tokenize", {"prompt": "Hello world", "add_special_tokens": False})
    assert st == 200 and "token_strs" not in v and v["tokens"] == [19556, 905]


@needs_model
def test_tokenize_vllm_messages_shape_is_the_prompt_a_completion_decodes(srv):
    st, tok = srv.post("/tokenize", {"model": "smol", "messages": MSG})
    assert st == 200 and tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 512
    st, done = srv.post("/v1/chat/completions", {"messages": MSG, "max_tokens": 1})
    assert st == 200 and done["usage"]["prompt_tokens"] == tok["count"]
    # Without the generation prompt: the assistant header's tokens are gone.
    st, bare = srv.post("/tokenize", {"messages": MSG, "add_generation_prompt": False})
    assert st == 200 and bare["tokens"] == tok["tokens"][:len(bare["tokens"])]
    assert 0 < len(tok["tokens"]) - len(bare["tokens"]) <= 4
    # continue_final_message: the prompt ends inside the assistant's partial reply.
    st, cont = srv.post("/tokenize", {
        "messages": MSG + [{"role": "assistant", "content": "Hello"}],
        "add_generation_prompt": False, "continue_final_message": True})
    assert st == 200 and cont["tokens"][:len(tok["tokens"])] == tok["tokens"]
    st, tail = srv.post("/detokenize", {"tokens": cont["tokens"][len(tok["tokens"]):]})
    assert tail["prompt"] == "Hello"


@needs_model
def test_detokenize_answers_llama_server_and_vllm_keys(srv):
    st, body = srv.post("/detokenize", {"model": "smol", "tokens": [19556, 905]})
    assert st == 200 and body == {"content": "Hello world", "prompt": "Hello world"}


@needs_model
def test_tokenize_mixed_shapes_is_400_naming_the_fields(srv):
    st, body = srv.post("/tokenize", {"content": "a", "prompt": "b", "add_special": True})
    assert st == 400
    msg = body["error"]["message"]
    assert "'content'" in msg and "'add_special'" in msg and "'prompt'" in msg


# --- 2. /v1/chat/completions/render --------------------------------------------------------

@needs_model
def test_chat_render_gives_the_prompt_text_and_ids_without_generating(srv):
    before = srv.metrics()["minfer_requests_completed_total"]
    st, r = srv.post("/v1/chat/completions/render", {"model": "tiny", "messages": MSG,
                                                     "max_tokens": 5})
    assert st == 200 and r["model"] == "tiny"
    assert r["prompt"].endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    st, tok = srv.post("/tokenize", {"messages": MSG})
    assert r["token_ids"] == tok["tokens"] and r["count"] == len(tok["tokens"])
    st, text = srv.post("/detokenize", {"tokens": r["token_ids"]})
    assert text["content"].endswith("user\nhi\nassistant\n")  # special tokens are not text
    assert srv.metrics()["minfer_requests_completed_total"] == before


# --- 3. SGLang's info routes and the HTTP/2 preface ----------------------------------------

@needs_model
def test_sglang_server_info_and_model_info(srv):
    from conftest import MODEL

    for path in ("/get_server_info", "/server_info"):
        st, raw = srv.request("GET", path)
        info = json.loads(raw)
        assert st == 200
        assert info["model_path"] == str(MODEL) and info["tokenizer_path"] == str(MODEL)
        assert info["served_model_name"] == "smol"
        assert info["context_length"] == 512 and info["max_running_requests"] == 2
        assert info["max_total_num_tokens"] == 1024 and info["max_queued_requests"] == 64
    for path in ("/get_model_info", "/model_info"):
        st, raw = srv.request("GET", path)
        info = json.loads(raw)
        assert st == 200 and info["model_path"] == str(MODEL)
        assert info["is_generation"] is True and info["model_type"] == "llama"


@needs_model
def test_http2_prior_knowledge_preface_gets_505_and_close_at_once(srv):
    host, port = srv.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        t0 = time.time()
        # The client preface, then (a write later) an empty SETTINGS frame and a
        # WINDOW_UPDATE, as h2 clients send them.
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        time.sleep(0.05)
        s.sendall(bytes.fromhex("000000040000000000" "000004080000000000000f0001"))
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += s.recv(4096)
        assert time.time() - t0 < 1.0
        time.sleep(0.3)  # an h2 client keeps the connection a moment before it falls back
    assert head.startswith(b"HTTP/1.1 505 ")
    assert b"\r\nConnection: close" in head
    assert json.loads(body)["error"]["code"] == 505
    log = wait_log(srv, "[server] PRI ")
    line = next(l for l in log.splitlines() if l.startswith("[server] PRI "))
    assert line.endswith(" 505 - ms"), line  # no duration: the request never started
    # The rest of the preface ("SM", the SETTINGS frame) is no request of its own.
    time.sleep(0.3)
    assert not [l for l in srv.stderr().splitlines() if l.startswith("[server]  ")]
    assert srv.healthy()


# --- 4. model ids ---------------------------------------------------------------------------

@needs_model
def test_served_model_name_ids_and_model_retrieve(srv):
    st, raw = srv.request("GET", "/v1/models")
    models = json.loads(raw)["data"]
    assert [m["id"] for m in models] == ["smol"] and models[0]["max_model_len"] == 512
    for name in ("smol", "tiny", "org/smol-v2"):
        st, raw = srv.request("GET", f"/v1/models/{name}")
        m = json.loads(raw)
        assert st == 200 and m["id"] == "smol" and m["object"] == "model"
        assert m["owned_by"] == "minfer" and m["max_model_len"] == 512
        assert m["aliases"] == ["tiny", "org/smol-v2"]
        assert m["meta"]["n_vocab"] == 49152 and m["meta"]["n_ctx_train"] == 8192
    st, raw = srv.request("GET", "/v1/models/gpt-4")
    assert st == 404 and json.loads(raw)["error"]["type"] == "not_found_error"
    # A request naming an alias is served (and its name echoed, as before).
    st, done = srv.post("/v1/chat/completions", {"model": "tiny", "messages": MSG,
                                                 "max_tokens": 1})
    assert st == 200 and done["model"] == "tiny"
    # Ollama's routes check the name: the alias is a served model there too.
    st, raw = srv.request("POST", "/api/show", {"model": "tiny"})
    assert st == 200
    st, raw = srv.request("POST", "/api/show", {"model": "gpt-4"})
    assert st == 404


# --- 5. request ids -------------------------------------------------------------------------

def post_with_headers(srv, path, body, headers):
    req = urllib.request.Request(srv.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.headers, json.loads(r.read())


@needs_model
def test_x_request_id_is_echoed_used_in_ids_and_logged(srv):
    h, body = post_with_headers(srv, "/v1/chat/completions",
                                {"messages": MSG, "max_tokens": 1}, {"X-Request-Id": "rt-42.a"})
    assert h["X-Request-Id"] == "rt-42.a" and body["id"] == "chatcmpl-rt-42.a"
    h, body = post_with_headers(srv, "/v1/completions", {"prompt": "a", "max_tokens": 1},
                                {"X-Request-Id": "rt-43"})
    assert body["id"] == "cmpl-rt-43"
    log = wait_log(srv, "id=rt-43")
    assert any(l.startswith("[server] POST /v1/chat/completions 200 ") and l.endswith(" id=rt-42.a")
               for l in log.splitlines())
    # Unusable ids (too long, a space) are replaced by a generated one.
    for bad in ("x" * 129, "has space"):
        h, body = post_with_headers(srv, "/v1/chat/completions", {"messages": MSG, "max_tokens": 1},
                                    {"X-Request-Id": bad})
        rid = h["X-Request-Id"]
        assert rid != bad and len(rid) == 24 and all(c in "0123456789abcdef" for c in rid)
        assert body["id"] == "chatcmpl-" + rid
    h, _ = post_with_headers(srv, "/tokenize", {"content": "a"}, {})
    assert len(h["X-Request-Id"]) == 24


# --- 6. /props and /slots -------------------------------------------------------------------

@needs_model
def test_props_in_llama_server_shape(srv):
    from conftest import MODEL

    st, raw = srv.request("GET", "/props")
    p = json.loads(raw)
    assert st == 200 and p["total_slots"] == 2 and p["model_path"] == str(MODEL)
    d = p["default_generation_settings"]
    assert d["n_ctx"] == 512
    assert d["params"]["top_k"] == 40 and abs(d["params"]["temperature"] - 0.8) < 1e-6
    assert "{% for message in messages %}" in p["chat_template"]
    assert p["build_info"].startswith("minfer ") and p["modalities"] == {"vision": False,
                                                                        "audio": False}


def slots(srv):
    st, raw = srv.request("GET", "/slots")
    assert st == 200
    return json.loads(raw)


@needs_model
def test_slots_report_cached_tokens_and_erase_drops_them(srv):
    for i in range(2):
        srv.request("POST", f"/slots/{i}?action=erase")
    assert [s["n_cached_tokens"] for s in slots(srv)] == [0, 0]
    st, done = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "slots"}],
                                                 "max_tokens": 2, "temperature": 0})
    assert st == 200
    ss = slots(srv)
    assert [s["id"] for s in ss] == [0, 1]
    assert all(s["n_ctx"] == 512 and s["is_processing"] is False and s["id_task"] == -1
               for s in ss)
    cached = [s for s in ss if s["n_cached_tokens"] > 0]
    # The prompt and the first generated token are in the cells (the last one never ran).
    assert len(cached) == 1
    assert cached[0]["n_cached_tokens"] == done["usage"]["prompt_tokens"] + 1
    st, body = srv.post(f"/slots/{cached[0]['id']}?action=erase", {})
    assert st == 200 and body == {"id_slot": cached[0]["id"],
                                  "n_erased": done["usage"]["prompt_tokens"] + 1}
    assert [s["n_cached_tokens"] for s in slots(srv)] == [0, 0]
    # The next request prefills in full: nothing reused.
    st, again = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "slots"}],
                                                  "max_tokens": 2, "temperature": 0})
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


@needs_model
def test_erasing_a_busy_slot_is_409(srv):
    req = urllib.request.Request(
        srv.url + "/v1/chat/completions",
        data=json.dumps({"messages": MSG, "max_tokens": 400, "stream": True,
                         "temperature": 1.0, "ignore_eos": True}).encode(),
        method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        r.readline()  # the first event (it may precede the admission on a busy machine)
        deadline = time.monotonic() + 20
        busy = [s for s in slots(srv) if s["is_processing"]]
        while not busy and time.monotonic() < deadline:
            time.sleep(0.05)
            busy = [s for s in slots(srv) if s["is_processing"]]
        assert len(busy) == 1 and busy[0]["id_task"] >= 1
        st, body = srv.post(f"/slots/{busy[0]['id']}?action=erase", {})
        assert st == 409 and body["error"]["code"] == 409
    assert srv.healthy()


# --- bad input on every new route: 4xx in OpenAI's shape -------------------------------------

BAD = [
    ("tokenize_bad_json", "/tokenize", b'{"prompt": ', 400),
    ("tokenize_prompt_not_string", "/tokenize", {"prompt": 5}, 400),
    ("tokenize_prompt_and_messages", "/tokenize", {"prompt": "a", "messages": MSG}, 400),
    ("tokenize_bool_wrong_type", "/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, 400),
    ("tokenize_messages_not_array", "/tokenize", {"messages": "hi"}, 400),
    ("tokenize_chat_field_on_prompt", "/tokenize", {"prompt": "a", "add_generation_prompt": True},
     400),
    ("tokenize_continue_with_generation", "/tokenize", {"messages": MSG,
                                                        "continue_final_message": True}, 400),
    ("tokenize_kwargs_not_object", "/tokenize", {"messages": MSG, "chat_template_kwargs": 3}, 400),
    ("tokenize_model_not_string", "/tokenize", {"prompt": "a", "model": 7}, 400),
    ("tokenize_options_without_text", "/tokenize", {"return_token_strs": True}, 400),
    ("detokenize_missing_tokens", "/detokenize", {"model": "smol"}, 400),
    ("detokenize_token_out_of_range", "/detokenize", {"tokens": [49152]}, 400),
    ("detokenize_negative_token", "/detokenize", {"tokens": [-1]}, 400),
    ("detokenize_token_not_int", "/detokenize", {"tokens": ["a"]}, 400),
    ("render_missing_messages", "/v1/chat/completions/render", {"model": "smol"}, 400),
    ("render_bad_json", "/v1/chat/completions/render", b"[", 400),
    ("slot_unknown_id", "/slots/7?action=erase", {}, 404),
    ("slot_id_not_number", "/slots/abc?action=erase", {}, 400),
    ("slot_bad_action", "/slots/0?action=explode", {}, 400),
    ("slot_no_action", "/slots/0", {}, 400),
    ("slot_bad_json_body", "/slots/0?action=erase", b"{", 400),
    ("slot_save_without_path", "/slots/0?action=save", {"filename": "x.bin"}, 400),
    ("slot_restore_without_path", "/slots/0?action=restore", {"filename": "x.bin"}, 400),
]


@needs_model
@pytest.mark.parametrize("name,path,body,status", BAD, ids=[c[0] for c in BAD])
def test_bad_input_on_info_routes_is_4xx_openai_shape(srv, name, path, body, status):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, data = srv.request("POST", path, raw=raw)
    assert got == status, (got, data[:300])
    err = json.loads(data)["error"]
    assert err["code"] == status and err["message"] and err["type"]


@needs_model
def test_model_get_unknown_is_404_openai_shape(srv):
    got, data = srv.request("GET", "/v1/models/nope")
    err = json.loads(data)["error"]
    assert got == 404 and err["code"] == 404 and "nope" in err["message"]


def reseal(raw, model_hash=None):
    """A session file with another model hash, its XXH3-64 checksum recomputed (layout:
    chat/session_file.h): what a file saved by a server of another model looks like."""
    import struct

    import xxhash

    body = bytearray(raw[:-8])
    if model_hash is not None:
        body[16:24] = struct.pack("<Q", model_hash)
    return bytes(body) + struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(body)))


@needs_model
def test_slot_save_restore_moves_a_prefix_cache_between_slots(make_server, tmp_path):
    s = make_server("--slots", 2, "--n-ctx", 512, "-t", 2, "--slot-save-path", tmp_path / "slots")
    story = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 6,
             "temperature": 0}
    st, first = s.post("/v1/chat/completions", story)
    assert st == 200
    held = [x for x in slots(s) if x["n_cached_tokens"] > 0]
    assert len(held) == 1
    n = held[0]["n_cached_tokens"]
    src, dst = held[0]["id"], 1 - held[0]["id"]
    st, saved = s.post(f"/slots/{src}?action=save", {"filename": "story.bin"})
    assert st == 200 and saved["id_slot"] == src and saved["filename"] == "story.bin"
    assert saved["n_saved"] == n
    f = tmp_path / "slots" / "story.bin"
    assert f.read_bytes()[:8] == b"MINFSESS" and saved["n_written"] == f.stat().st_size
    st, erased = s.post(f"/slots/{src}?action=erase", {})
    assert erased["n_erased"] == n
    st, restored = s.post(f"/slots/{dst}?action=restore", {"filename": "story.bin"})
    assert st == 200 and restored["n_restored"] == n and restored["n_read"] == f.stat().st_size
    by_id = {x["id"]: x["n_cached_tokens"] for x in slots(s)}
    assert by_id == {src: 0, dst: n}
    # The restored cells are the prefix cache: the same request reuses them and, greedy,
    # gives the same text.
    st, again = s.post("/v1/chat/completions", story)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]

    # Files that cannot be restored: 400 naming why, and the server keeps serving.
    (tmp_path / "slots" / "other.bin").write_bytes(reseal(f.read_bytes(), model_hash=12345))
    (tmp_path / "slots" / "cut.bin").write_bytes(f.read_bytes()[:100])
    for name, words in (("other.bin", "another model"), ("cut.bin", "truncated"),
                        ("absent.bin", "cannot open")):
        st, body = s.post(f"/slots/{dst}?action=restore", {"filename": name})
        assert st == 400 and words in body["error"]["message"], body
    # A parent-folder escape, spelled in two parts: it is hostile input, not a path
    # this tree names (tests/repo/check_outside_paths.py reads every tracked file).
    for bad in (".." + "/story.bin", "a/b.bin", "..", "", 5):
        st, body = s.post(f"/slots/{dst}?action=save", {"filename": bad})
        assert st == 400 and "filename" in body["error"]["message"]
    st, body = s.post(f"/slots/{dst}?action=save", {})
    assert st == 400
    st, body = s.post("/slots/5?action=save", {"filename": "x.bin"})
    assert st == 404
    assert not (tmp_path / "x.bin").exists() and s.healthy()

    # A server that has run no forward yet (no KV regions) restores the file too.
    fresh = make_server("--slots", 2, "--n-ctx", 512, "-t", 2, "--slot-save-path",
                        tmp_path / "slots")
    st, restored = fresh.post("/slots/0?action=restore", {"filename": "story.bin"})
    assert st == 200 and restored["n_restored"] == n
    st, again = fresh.post("/v1/chat/completions", story)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    # A server with other KV cache types refuses the file, naming both (-ctk / -ctv).
    other = make_server("--slots", 2, "--n-ctx", 512, "-t", 2, "-ctk", "q8_0", "-ctv", "f16",
                        "--slot-save-path", tmp_path / "slots")
    st, body = other.post("/slots/0?action=restore", {"filename": "story.bin"})
    assert st == 400, body
    assert ("holds a f32 KV cache (K f32, V f32), this run's is q8_0/f16 (K q8_0, V f16)"
            in body["error"]["message"]), body
    assert other.healthy()
