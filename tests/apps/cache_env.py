"""What the model-cache tests share: a real HTTP server on loopback for a handler, an
isolated cache folder in the environment minfer runs with, the run helper and the
listing of the models folder."""
import contextlib
import http.server
import os
import subprocess
import threading

MINFER = os.environ.get("MINFER_BIN", "minfer")


@contextlib.contextmanager
def loopback(handler, tmp_path, **env_extra):
    """Serves `handler` on 127.0.0.1 (a free port) and yields (base URL, cache folder,
    environment with MINFER_CACHE there and no MINFER_MODEL_DIR); `env_extra` values may
    use {url}."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        cache = tmp_path / "cache"
        env = dict(os.environ, MINFER_CACHE=str(cache),
                   **{k: v.format(url=url) for k, v in env_extra.items()})
        env.pop("MINFER_MODEL_DIR", None)
        yield url, cache, env
    finally:
        srv.shutdown()


def run(env, *args, timeout=120):
    return subprocess.run([MINFER, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def models(cache):
    d = cache / "models"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []
