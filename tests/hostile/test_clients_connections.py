"""More connections than the open-files limit allows: a fast 503, never a reset, and
the clients already connected keep being served.

Issue 24, case 2: with the usual 1,024 open-files limit, 1,100 connections that
sent nothing made every normal request fail with a reset, and nothing was
logged. The child here runs with that limit (soft and hard), and the default
``[server] max_connections`` (derived from it) applies.
"""

from __future__ import annotations

import resource
from pathlib import Path

from tests.hostile.clients_support import MODEL, connect, read_answer, scrape, serving_apart
from tests.support.probe import Probe

NOFILE = 1024
IDLE = 1100


def _low_open_files_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def test_connections_beyond_the_cap_get_503_not_a_reset(tmp_path: Path) -> None:
    with serving_apart(tmp_path, preexec_fn=_low_open_files_limit) as gw, \
            Probe(gw.url, MODEL) as probe:
        quiet = probe.measure(20)
        idle = []
        with probe.running():
            refused_early = []
            for _ in range(IDLE):
                s = connect(gw.port)
                idle.append(s)
            # New clients past the cap: each gets a whole 503 answer, then the close.
            late = []
            for _ in range(20):
                s = connect(gw.port)
                s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
                late.append(read_answer(s, 5.0))
                s.close()
            refused_early = [s for s in idle if _answered_503(s)]
        probe.assert_flat(quiet)
        for s in idle:
            s.close()
        series = scrape(gw.url, "humpyard_connections_refused_total")
        log = gw.output()
    for answer in late:
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert b"connection: close" in answer
        assert b"too_many_connections" in answer
    # The default cap is the limit less a reserve: some of the 1,100 were refused too.
    assert len(refused_early) >= IDLE - NOFILE, len(refused_early)
    assert series.get('{reason="max_connections"}', 0) >= 20 + IDLE - NOFILE, series
    warnings = [line for line in log.splitlines()
                if " WARNING " in line and "max_connections" in line]
    assert 1 <= len(warnings) <= 3, warnings  # logged, and rate-limited


def _answered_503(s: object) -> bool:
    import socket
    assert isinstance(s, socket.socket)
    s.setblocking(False)
    try:
        data = s.recv(65536)
    except (BlockingIOError, ConnectionResetError):
        return False
    finally:
        s.setblocking(True)
    return data.startswith(b"HTTP/1.1 503 ")
