"""The report's own setup: ``humpyard serve`` as a child process with default
settings, a client that sends a buffered request and leaves while the upstream
thinks. The upstream call is closed at once (not at ``timeout_secs``, 600 s)
and the decision, read back over HTTP, is a 499 ``client_closed``; the request
log line says so too."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.hostile.disconnect_client import body_for
from tests.support.watched_upstream import HOLD, WatchedUpstream


def test_humpyard_serve_cancels_a_call_whose_client_left(tmp_path: Path) -> None:
    with WatchedUpstream(lambda n, body: [HOLD]) as up:
        cfg = tmp_path / "humpyard.toml"
        cfg.write_text(f"""
[ledger]
path = "{tmp_path / 'ledger.db'}"
[providers.p]
base_url = "{up.url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
""")
        server = ServeProcess(cfg, tmp_path / "serve.log").start()
        try:
            data = json.dumps({**body_for("/v1/chat/completions", stream=False),
                               "model": "t"}).encode()
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(data), data))
            up.wait_held(1, timeout=10)
            sock.close()
            left = time.monotonic()
            assert up.wait_closed(1, 5) - left < 2
            deadline = time.monotonic() + 10
            while True:
                got = httpx.get(server.url + "/v1/decisions", timeout=5).json()["decisions"]
                if got:
                    break
                assert time.monotonic() < deadline, "no decision recorded"
                time.sleep(0.05)
            [d] = got
            assert d["status"] == 499 and d["outcome"] == "client_closed"
            assert [a["cancelled"] for a in d["attempts"]] == [True]
        finally:
            server.stop()
        assert "status=499" in server.output() and "outcome=client_closed" in server.output()
