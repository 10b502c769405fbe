"""Stage 17 tests: the HTTP layer of `minfer serve` on loopback — bodies read as JSON
whatever their Content-Type, 405 with Allow on a known route, CORS preflights and
origins, the body limit enforced while reading, and the request log of a client that
left mid-stream."""
import http.client
import json
import socket
import time
import urllib.parse

import pytest

from conftest import needs_model

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def conn(server, timeout=60):
    u = urllib.parse.urlparse(server.url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def assert_openai_error(data, status):
    err = json.loads(data)["error"]
    assert err["code"] == status
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    return err


@needs_model
@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_json_body_accepted_whatever_content_type(server, content_type):
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0})
    c = conn(server)
    headers = {"Content-Type": content_type} if content_type else {}
    c.request("POST", COMP, body=body.encode(), headers=headers)
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, data[:300]
    assert json.loads(data)["usage"]["completion_tokens"] == 2


@needs_model
def test_form_body_that_is_not_json_is_400_openai_shaped(server):
    c = conn(server)
    c.request("POST", CHAT, body=b"messages=hi",
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    r = c.getresponse()
    assert r.status == 400
    assert_openai_error(r.read(), 400)["type"] == "invalid_request_error"
