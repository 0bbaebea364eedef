"""Connections that never finish a request head, or sit idle between requests, are
closed: ``[server] header_timeout_secs`` and ``keepalive_timeout_secs``.

Issue 24, case 2: 5,000 connections that sent nothing were never closed, and a
slowloris (a header byte now and then) held its connection for as long as it
liked. Each test runs a real ``humpyard serve`` and holds raw sockets.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.hostile.clients_support import (
    MODEL,
    closed_by_peer,
    connect,
    read_answer,
    scrape,
    serving,
    serving_apart,
    wait_until,
)
from tests.support.probe import Probe

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
