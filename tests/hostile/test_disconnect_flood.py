"""An attack by leaving: many clients send requests that keep an upstream busy and
go away. Against ``humpyard serve`` (a child process, default settings), each
abandoned call is closed at once and its concurrency slot freed, so nothing
piles up (before, every one held its upstream connection and slot for
``timeout_secs``); a probe client on another route is served with flat
latency throughout; every abandoned request is recorded as 499."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.support.fake_upstream import FakeUpstream
from tests.support.probe import Probe
from tests.support.watched_upstream import HOLD, WatchedUpstream

CLIENTS = 40


def _metric(url: str, series: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def test_a_flood_of_clients_that_leave_holds_nothing(tmp_path: Path) -> None:
    with WatchedUpstream(lambda n, body: [HOLD]) as slow, FakeUpstream() as fast:
        cfg = tmp_path / "humpyard.toml"
        cfg.write_text(f"""
[ledger]
path = "{tmp_path / 'ledger.db'}"
[providers.slow]
base_url = "{slow.url}"
[providers.fast]
base_url = "{fast.url}"
[targets.stalls]
endpoints = [{{ provider = "slow", model = "m" }}]
[targets.ok]
endpoints = [{{ provider = "fast", model = "m" }}]
""")
        server = ServeProcess(cfg, tmp_path / "serve.log", log_level="WARNING").start()
        try:
            body = json.dumps({"model": "stalls", "messages": [
                {"role": "user", "content": "hi"}]}).encode()
            request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body))
            with Probe(server.url, "ok") as probe:
                quiet = probe.measure(20)
                with probe.running():
                    socks = []
                    for _ in range(CLIENTS):
                        sock = socket.create_connection(("127.0.0.1", server.port))
                        sock.sendall(request)
                        socks.append(sock)
                    slow.wait_held(CLIENTS, timeout=20)
                    assert _metric(server.url, 'humpyard_upstream_in_flight{provider="slow"}') \
                        == CLIENTS
                    for sock in socks:
                        sock.close()
                    left = time.monotonic()
                    assert slow.wait_closed(CLIENTS, 10) - left < 5
                probe.assert_flat(quiet)
            deadline = time.monotonic() + 10
            while _metric(server.url, 'humpyard_upstream_in_flight{provider="slow"}') != 0:
                assert time.monotonic() < deadline, "slots still held"
                time.sleep(0.05)
            while True:
                got = httpx.get(server.url + "/v1/decisions",
                                params={"outcome": "client_closed", "limit": 1000},
                                timeout=5).json()["decisions"]
                if len(got) == CLIENTS:
                    break
                assert time.monotonic() < deadline, f"{len(got)} of {CLIENTS} recorded"
                time.sleep(0.05)
            assert {d["status"] for d in got} == {499}
            assert _metric(server.url,
                           'humpyard_client_disconnects_total{phase="waiting"}') == CLIENTS
        finally:
            server.stop()
