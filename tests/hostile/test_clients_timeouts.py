"""Connections that never finish a request head, trickle its body, stop reading
their answer, or sit idle between requests, are closed: ``[server]
header_timeout_secs``, ``body_timeout_secs``, ``send_timeout_secs`` and
``keepalive_timeout_secs``.

Issue 24, case 2: 5,000 connections that sent nothing were never closed, and a
slowloris (a header byte now and then) held its connection for as long as it
liked. The same held for a body sent a byte now and then and for a client that
asked for a stream and read none of it (found 2026-12-03). Each test runs a
real ``humpyard serve`` and holds raw sockets.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.hostile.clients_support import (
    MODEL,
    closed_by_peer,
    connect,
    read_answer,
    readable,
    scrape,
    serving,
    serving_apart,
    wait_until,
)
from tests.support.probe import Probe, rss_mb
from tests.support.rawserver import RawServer
from tests.wire.test_relay_cuts import _chunk

DONE = b"data: [DONE]\n\n"

IDLE = 200


def test_idle_connections_and_slowloris_are_closed_after_the_header_timeout(
        tmp_path: Path) -> None:
    with serving_apart(tmp_path, "header_timeout_secs = 1") as gw, Probe(gw.url, MODEL) as probe:
        quiet = probe.measure(20)
        with probe.running():
            idle = [connect(gw.port) for _ in range(IDLE)]
            slow = [connect(gw.port) for _ in range(5)]
            for s in slow:
                s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            opened = time.monotonic()
            # A slowloris: one header byte every 0.2 s, each arriving well within
            # any per-read timeout, the head never complete.
            while time.monotonic() - opened < 1.6:
                for s in slow:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass
                time.sleep(0.2)
            assert wait_until(lambda: all(closed_by_peer(s) for s in idle), 3.0), \
                f"{sum(not closed_by_peer(s) for s in idle)} of {IDLE} idle connections open"
            answers = [read_answer(s, 3.0) for s in slow]
            elapsed = time.monotonic() - opened
        probe.assert_flat(quiet)
    for a in answers:
        assert a.startswith(b"HTTP/1.1 408 "), a[:200]
        assert b"connection: close" in a
    assert elapsed < 4.0
    for s in idle + slow:
        s.close()


def test_configured_limits_apply_and_are_counted(tmp_path: Path) -> None:
    """``[server]`` values other than the defaults: at most 3 connections, a 0.5 s
    header timeout (counted in the metric), a 1 s keep-alive timeout, a 4 KiB head."""
    server = ("header_timeout_secs = 0.5\nkeepalive_timeout_secs = 1\nmax_header_bytes = 4096\n"
              "max_connections = 3")
    with serving(tmp_path, server) as (gw, _):
        held = [connect(gw.port) for _ in range(3)]
        extra = connect(gw.port)
        extra.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        over_cap = read_answer(extra)
        extra.close()
        assert wait_until(lambda: all(closed_by_peer(s) for s in held), 3.0)
        for s in held:
            s.close()

        idle = connect(gw.port)
        assert wait_until(lambda: closed_by_peer(idle), 3.0)
        idle.close()

        big = connect(gw.port)
        big.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 8000)
        too_large = read_answer(big)
        big.close()

        s = connect(gw.port)
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(5)
        first = s.recv(65536)
        answered = time.monotonic()
        assert wait_until(lambda: closed_by_peer(s), 4.0), "the idle connection stayed open"
        idle_for = time.monotonic() - answered
        s.close()
        series = scrape(gw.url, "humpyard_connections_refused_total")
    assert over_cap.startswith(b"HTTP/1.1 503 ") and b"connection: close" in over_cap
    assert too_large.startswith(b"HTTP/1.1 431 ") and b"4096" in too_large, too_large[:200]
    assert first.startswith(b"HTTP/1.1 200 ")
    assert 0.8 < idle_for < 3.0
    assert series.get('{reason="header_timeout"}', 0) >= 3, series
    assert series.get('{reason="max_connections"}', 0) >= 1, series
    assert series.get('{reason="headers_too_large"}') == 1, series


def _trickle(s, until: float, byte: bytes = b" ", every: float = 0.2) -> None:
    """Send ``byte`` every ``every`` seconds until ``until`` (monotonic) or the
    server answers or closes (what it sent is left to read)."""
    while time.monotonic() < until:
        try:
            s.sendall(byte)
        except OSError:
            return
        if readable(s, every):
            return


def test_a_body_that_trickles_in_is_cut_at_the_body_timeout(tmp_path: Path) -> None:
    """A slow POST (a head at once, then the body a byte now and then) held its
    connection and its request for as long as the client liked: the header timeout
    ends with the head. ``body_timeout_secs`` bounds the body: a 408 naming the limit,
    ``connection: close``, the request recorded as 408 and the refusal counted; a path
    that answers without reading the body (the connection then still reads it) is
    closed at the same bound. A slow body that arrives in time is served."""
    with serving(tmp_path, "body_timeout_secs = 1") as (gw, up):
        chat = connect(gw.port)
        chat.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
        health = connect(gw.port)
        health.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 100000000\r\n\r\n")
        opened = time.monotonic()
        for s in (chat, health):
            s.setblocking(True)
        _trickle(chat, opened + 6)
        answer = read_answer(chat, 3.0)
        cut_after = time.monotonic() - opened
        assert readable(health, 3.0)
        health_answer = health.recv(65536)  # answered at once; the body is still read
        health_closed = False
        while not health_closed and time.monotonic() < opened + 6:
            try:
                health.sendall(b" ")
            except OSError:
                break
            time.sleep(0.2)
            health_closed = closed_by_peer(health)
        health_closed = health_closed or closed_by_peer(health)
        chat.close()
        health.close()

        body = b'{"model":"t","messages":[{"role":"user","content":"hi"}]}'
        slow = connect(gw.port)
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 10):  # ~0.5 s for the whole body: within the bound
            slow.sendall(body[i:i + 10])
            time.sleep(0.08)
        served = read_answer(slow, 5.0)
        slow.close()

        series = scrape(gw.url, "humpyard_connections_refused_total")
        decisions = httpx.get(gw.url + "/v1/decisions?limit=10", timeout=5).json()["decisions"]
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"connection: close" in answer.lower() and b"body_timeout_secs" in answer
    assert cut_after < 4.0
    assert health_answer.startswith(b"HTTP/1.1 200 "), health_answer[:200]
    assert health_closed, "a body nobody reads held its connection past the body timeout"
    assert served.startswith(b"HTTP/1.1 200 "), served[:300]
    assert series.get('{reason="body_timeout"}') == 2, series
    statuses = sorted(d["status"] for d in decisions)
    assert statuses == [200, 408], decisions


def _streaming_upstream(events: int) -> RawServer:
    """An upstream that streams ``events`` events of 16 KB each as fast as it may."""
    big = _chunk({"content": "x" * 16_000})
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    return RawServer([head, *[b"%x\r\n%b\r\n" % (len(big), big)] * events,
                      b"%x\r\n%b\r\n" % (len(DONE), DONE), b"0\r\n\r\n"])


def _ask_stream(port: int, rcvbuf: int, model: str) -> socket.socket:
    s = connect(port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    body = b'{"model":"%b","stream":true,"messages":[{"role":"user","content":"hi"}]}' % (
        model.encode())
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    return s


def test_a_client_that_stops_reading_is_cut_at_the_send_timeout(tmp_path: Path) -> None:
    """A client that asks for a stream and then reads nothing held the stream, its
    upstream connection and the provider's concurrency slot for as long as it liked:
    the relay waits for the client's socket to drain, and nothing bounded that wait.
    ``send_timeout_secs``: a connection whose answer cannot be written for that long
    is closed, the request recorded as a client that left (499, ``relaying``) and the
    close counted; meanwhile the gateway reads no more of the upstream than the client
    takes (its memory stays flat while 32 MB are offered). A client that reads slowly
    but keeps reading (its answer paused and resumed many times, for longer than the
    timeout in all) is served whole."""
    with _streaming_upstream(2_000) as stalled_up, _streaming_upstream(700) as slow_up:
        cfg = tmp_path / "humpyard.toml"
        cfg.write_text(f"""
[ledger]
path = "{tmp_path / 'ledger.db'}"
[providers.p]
base_url = "{stalled_up.url}/v1"
[providers.q]
base_url = "{slow_up.url}/v1"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[targets.slow]
endpoints = [{{ provider = "q", model = "m" }}]
[server]
send_timeout_secs = 1
""")
        with ServeProcess(cfg, tmp_path / "serve.log") as gw:
            before = rss_mb(gw.pid)
            stalled = _ask_stream(gw.port, 4096, "t")
            assert readable(stalled, 5.0)
            assert stalled.recv(64).startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()  # from here on the client reads nothing
            poll_until = started + 8
            grown = 0.0
            while time.monotonic() < poll_until and not _recorded(gw.url, 1):
                grown = max(grown, rss_mb(gw.pid) - before)
                time.sleep(0.1)
            cut_after = time.monotonic() - started
            stalled.close()

            slow = _ask_stream(gw.port, 65536, "slow")
            got = b""
            slow.settimeout(10)
            while not got.endswith(b"0\r\n\r\n"):  # ~11 MB, 128 KiB every 0.05 s: ~4 s
                data = slow.recv(131072)
                if not data:
                    break
                got += data
                time.sleep(0.05)
            slow.close()
            series = scrape(gw.url, "humpyard_connections_refused_total")
            decisions = httpx.get(gw.url + "/v1/decisions?limit=10",
                                  timeout=5).json()["decisions"]
    assert cut_after < 6.0, "a client that read nothing held its stream"
    assert grown < 16, f"the gateway grew {grown:.1f} MB for a client that reads nothing"
    assert got.endswith(b"0\r\n\r\n") and b"[DONE]" in got, got[-200:]
    assert series.get('{reason="send_timeout"}') == 1, series
    by_target = {d["target"]: d for d in decisions}
    assert by_target["t"]["status"] == 499 and by_target["slow"]["status"] == 200, decisions


def _recorded(url: str, n: int) -> bool:
    r = httpx.get(url + "/v1/decisions?limit=10", timeout=5)
    return r.status_code == 200 and len(r.json()["decisions"]) >= n
