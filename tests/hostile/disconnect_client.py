"""What the disconnect tests share: a raw-socket client that sends one request and
can leave at any moment, the request bodies of the three client paths, and a
gateway configuration over one upstream (priced, with a budgeted key and a
breaker that one counted failure would open)."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from tests.support.gateway import Running

KEY = "sk-disconnect-test"
PATHS = ("/v1/chat/completions", "/v1/messages", "/v1/responses")


def body_for(path: str, *, stream: bool) -> dict[str, Any]:
    if path == "/v1/messages":
        return {"model": "r", "max_tokens": 50, "stream": stream,
                "messages": [{"role": "user", "content": "say many words " * 20}]}
    if path == "/v1/responses":
        return {"model": "r", "stream": stream, "input": "say many words " * 20}
    return {"model": "r", "stream": stream,
            "messages": [{"role": "user", "content": "say many words " * 20}]}


def config(url: str, protocol: str = "openai") -> str:
    """Route ``r``: target ``t`` (provider ``p``, model ``m``, priced), then ``u``
    (provider ``q`` at the same upstream) to fail over to, which a client leaving
    must never reach."""
    return f"""
[providers.p]
base_url = "{url}"
protocol = "{protocol}"
api_key_env = "UP_KEY"
max_retries = 1
[providers.q]
base_url = "{url}"
protocol = "{protocol}"
[targets.t]
endpoints = [{{ provider = "p", model = "m", price = {{ input = 3.0, output = 15.0 }} }}]
[targets.u]
endpoints = [{{ provider = "q", model = "m2" }}]
[routes.r]
type = "passthrough"
targets = ["t", "u"]
[health]
failure_threshold = 1
[keys.k]
key_env = "CLIENT_KEY"
budget = {{ usd = 100, period = "day" }}
"""


ENV = {"UP_KEY": "sk-upstream", "CLIENT_KEY": KEY}


def post(gw: Running, path: str, body: dict[str, Any]) -> socket.socket:
    """Send one request on a fresh connection; the answer is left unread."""
    host, port = gw.url.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
                 % (path.encode(), KEY.encode(), len(data), data))
    return sock


def read_until(sock: socket.socket, marker: bytes, timeout: float = 5.0) -> bytes:
    """Read the answer until ``marker`` has arrived; what came so far."""
    sock.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while marker not in got:
        assert time.monotonic() < deadline, f"no {marker!r} in {got[-300:]!r}"
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no {marker!r} in {timeout} s: {got[-600:]!r}") from None
        assert piece, f"the gateway closed before {marker!r}: {got[-300:]!r}"
        got += piece
    return got


def leave(sock: socket.socket) -> float:
    """Close the connection (the client is gone); when, as ``time.monotonic()``."""
    sock.close()
    return time.monotonic()


def decisions(gw: Running, count: int = 1) -> list[dict[str, Any]]:
    gw.recorded(count)
    return gw.gw.store.list_decisions(limit=100)[0]  # type: ignore[no-any-return]
