"""Slow clients are cut off: a replica served by uvicorn with deploy/replica/http_limits.py's header
deadline and body deadline, talked to over raw sockets that trickle their bytes."""

from __future__ import annotations

import json
import socket
import time

import pytest
from fastapi.testclient import TestClient

from deploy.replica.http_limits import header_timeout_protocol
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings

HEADER_S = BODY_S = 0.6
HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def url(tmp_path_factory, live):
    tmp = tmp_path_factory.mktemp("limits")
    app = create_app(ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name="m", admin_token="unit-test-admin-token",
        spool_dir=tmp / "spool", cache_dir=tmp / "cache", body_timeout_s=BODY_S,
    ))
    with TestClient(app), live(app, http=header_timeout_protocol(HEADER_S)) as base:
        yield base


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.settimeout(0.05)
    return sock


def _trickle(sock: socket.socket, data: bytes, every_s: float, for_s: float) -> tuple[bytes, float]:
    """Send ``data`` a byte at a time until the server closes; (what it sent back, when)."""
    start, got, i = time.monotonic(), b"", 0
    while time.monotonic() - start < for_s:
        try:
            chunk = sock.recv(65536)
            if not chunk:
                return got, time.monotonic() - start
            got += chunk
        except TimeoutError:
            pass
        try:
            sock.sendall(data[i % len(data) : i % len(data) + 1])
        except (BrokenPipeError, ConnectionResetError):
            return got, time.monotonic() - start
        i += 1
        time.sleep(every_s)
    raise AssertionError(f"connection still open after {for_s}s (got {got!r})")


def test_trickled_headers_are_cut_off(url):
    sock = _connect(url)
    sock.sendall(HEAD)
    got, after = _trickle(sock, b"X-Slow: yes\r\n", every_s=0.1, for_s=10 * HEADER_S)
    assert got == b"" and after < 5 * HEADER_S  # closed: no request ever reached the app
    sock.close()


def test_a_silent_connection_is_cut_off(url):
    sock = _connect(url)
    start = time.monotonic()
    sock.settimeout(10 * HEADER_S)
    assert sock.recv(1) == b""
    assert time.monotonic() - start < 5 * HEADER_S
    sock.close()


def test_trickled_body_is_408_then_closed(url):
    sock = _connect(url)
    sock.sendall(HEAD + b"Content-Length: 1000\r\n\r\n")
    got, after = _trickle(sock, b'{"prompt": "', every_s=0.1, for_s=10 * BODY_S)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"
    assert after < 5 * BODY_S
    sock.close()


def test_a_prompt_client_keeps_its_connection_for_several_requests(url):
    sock = _connect(url)
    sock.settimeout(5)
    body = json.dumps({"prompt": "1+1 = ", "max_tokens": 2}).encode()
    for _ in range(3):  # keep-alive: each request head is timed from the previous response
        sock.sendall(HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 503")  # no model loaded: answered, not cut off
        time.sleep(HEADER_S / 2)
    sock.close()
