"""A client that leaves mid-stream: the gateway stops reading the upstream, closes
it and records the request at once (499, with the usage estimated from what was
relayed), on both client paths (real sockets). Leaving in the other phases, and
what it costs: tests/hostile/test_disconnect_*.py."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from humpyard.clock import SystemClock
from humpyard.config import load_config_text
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store import open_store
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import ok, stall

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
        # the answer had started: recorded as the client's leaving, with the target
        # that served and the tokens relayed until then (the usage chunk never came)
        assert decision["status"] == 499 and decision["outcome"] == "client_closed"
        assert decision["target"] == "t" and decision["usage_estimated"] is True
        assert decision["usage"]["output_tokens"] > 0
        # the upstream connection was closed, not kept reading for nobody
        assert [c for c in gw.gw.client.fast.connections if not c.is_idle()] == []


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_buffered_answer_the_client_never_got_is_still_recorded(protocol: str) -> None:
    # the answer is recorded after it is sent (recording.py, opened by http/intake.py); a send that
    # fails must not lose the record
    path, body = REQUESTS[protocol]
    body = body.replace(b'"stream":true', b'"stream":false')
    with FakeUpstream() as up:
        config_ = load_config_text(config(up.url), env={})
        gw = Gateway(config_, open_store(":memory:", SystemClock()))
        app = create_app(config_, gateway=gw)
        sent: list[str] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message["type"])
            if message["type"] == "http.response.body":
                raise OSError("the client is gone")

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 2),
                 "headers": [(b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())]}

        async def main() -> list:
            try:
                with pytest.raises(OSError):
                    await app(scope, receive, send)
                assert gw.writer.flush(5)
                return gw.store.list_decisions(limit=10)[0]
            finally:
                await gw.aclose()
        [decision] = asyncio.run(main())
        assert sent == ["http.response.start", "http.response.body"]
        assert decision["status"] == 200 and decision["outcome"] == "ok"


def _asgi(path: str, body: bytes) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


@pytest.mark.parametrize("who", ["client", "server"])
def test_only_the_clients_leaving_is_swallowed(who: str) -> None:
    # The app ends quietly when its client left (nobody to answer); a cancellation
    # from elsewhere (the server stopping) still propagates. Either way: one 499.
    path, body = REQUESTS["openai"]
    body = body.replace(b'"stream":true', b'"stream":false')
    with FakeUpstream() as up:
        up.script(stall())
        config_ = load_config_text(config(up.url), env={})
        gw = Gateway(config_, open_store(":memory:", SystemClock()))
        app = create_app(config_, gateway=gw)
        sent: list[dict] = []

        async def main() -> tuple[str, list]:
            gone = asyncio.Event()
            inbox = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive() -> dict:
                if inbox:
                    return inbox.pop(0)
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict) -> None:
                sent.append(message)

            task = asyncio.ensure_future(app(_asgi(path, body), receive, send))
            try:
                while not up.requests:
                    await asyncio.sleep(0.01)
                if who == "client":
                    gone.set()
                else:
                    task.cancel()
                try:
                    await asyncio.wait_for(task, 5)
                    ended = "returned"
                except asyncio.CancelledError:
                    ended = "cancelled"
                assert gw.writer.flush(5)
                return ended, gw.store.list_decisions(limit=10)[0]
            finally:
                await gw.aclose()

        ended, [decision] = asyncio.run(main())
        assert ended == ("returned" if who == "client" else "cancelled")
        assert sent == []  # nothing was answered
        assert decision["status"] == 499 and decision["outcome"] == "client_closed"
        assert [a.get("cancelled") for a in decision["attempts"]] == [True]
        disconnects = gw.metrics.client_disconnects.value(phase="waiting")
        assert disconnects == (1 if who == "client" else 0)
