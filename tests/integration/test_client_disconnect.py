"""A client that leaves mid-stream: the gateway stops reading the upstream, closes
it and records the request at once, on both client paths (real sockets)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import ok

CHUNKS = [f"word{i} " for i in range(40)]  # 40 × 0.25 s: ten seconds if read to the end

REQUESTS = {
    "openai": ("/v1/chat/completions",
               b'{"model":"r","stream":true,"messages":[{"role":"user","content":"hi"}]}'),
    "anthropic": ("/v1/messages",
                  b'{"model":"r","stream":true,"max_tokens":50,'
                  b'"messages":[{"role":"user","content":"hi"}]}'),
}


def config(url: str) -> str:
    return f"""
[providers.p]
base_url = "{url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[routes.r]
type = "passthrough"
targets = ["t"]
"""


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_leaving_mid_stream_closes_the_upstream_and_records_the_request(protocol: str) -> None:
    path, body = REQUESTS[protocol]
    with FakeUpstream() as up, running_gateway(config(up.url)) as gw:
        up.script(ok(CHUNKS, chunk_delay=0.25))
        host, port = gw.url.split("//")[1].split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
        got = b""
        while b"word0" not in got:  # the answer has started
            got += sock.recv(65536)
        assert got.startswith(b"HTTP/1.1 200")
        sock.close()
        left = time.monotonic()
        deadline = left + 5
        while time.monotonic() < deadline:
            gw.gw.writer.flush(1)
            if gw.decisions() and not [c for c in gw.gw.client.fast.connections if not c.is_idle()]:
                break
            time.sleep(0.05)
        [decision] = gw.decisions()
        assert time.monotonic() - left < 5  # not the ten seconds of the whole answer
        assert decision["status"] == 200 and decision["target"] == "t"
        # the upstream connection was closed, not kept reading for nobody
        assert [c for c in gw.gw.client.fast.connections if not c.is_idle()] == []
