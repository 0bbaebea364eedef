"""More connections than the open-files limit allows: a fast 503, never a reset, and
the clients already connected keep being served.

Issue 24, case 2: with the usual 1,024 open-files limit, 1,100 connections that
sent nothing made every normal request fail with a reset, and nothing was
logged. The child here runs with that limit (soft and hard), and the default
``[server] max_connections`` (derived from it) applies. The attacker is a
process of its own, so that the probe in the test's process measures the
gateway rather than a GIL shared with the attacker.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import socket
from multiprocessing.connection import Connection
from pathlib import Path

from tests.hostile.clients_support import MODEL, connect, read_answer, scrape, serving_apart
from tests.support.probe import Probe

NOFILE = 1024
IDLE = 1100
LATE = 20


def _low_open_files_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _answered_503(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        data = s.recv(65536)
    except (BlockingIOError, ConnectionResetError):
        return False
    finally:
        s.setblocking(True)
    return data.startswith(b"HTTP/1.1 503 ")


def attacker(port: int, pipe: Connection) -> None:
    """Open ``IDLE`` connections that send nothing and hold them; then ``LATE`` new
    clients each send a request and read the whole answer (or see a reset). Reports
    the late answers and how many idle connections got a 503, then waits to close."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    # The attacker is somewhere else in real life: here it shares two cores with the
    # gateway and the probe, so it runs at the lowest priority, leaving them the CPU.
    os.nice(19)
    idle = [connect(port) for _ in range(IDLE)]
    late = []
    for _ in range(LATE):
        s = connect(port)
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            late.append(read_answer(s, 5.0))
        except ConnectionResetError:
            late.append(b"<reset>")
        s.close()
    pipe.send((late, sum(_answered_503(s) for s in idle)))
    pipe.recv()
    for s in idle:
        s.close()


def test_connections_beyond_the_cap_get_503_not_a_reset(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    with serving_apart(tmp_path, preexec_fn=_low_open_files_limit) as gw, \
            Probe(gw.url, MODEL) as probe:
        quiet = probe.measure(20)
        ours, theirs = ctx.Pipe()
        child = ctx.Process(target=attacker, args=(gw.port, theirs), daemon=True)
        try:
            with probe.running():
                child.start()
                assert ours.poll(60), "the attacker did not finish"
                late, refused_idle = ours.recv()
                probe.at_least(5)  # its connections are still held: still the attack
            probe.assert_flat(quiet)
        finally:
            ours.send("close")
            child.join(10)
            if child.is_alive():
                child.kill()
        series = scrape(gw.url, "humpyard_connections_refused_total")
        log = gw.output()
    for answer in late:
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert b"connection: close" in answer
        assert b"too_many_connections" in answer
    # The default cap is the limit less a reserve: some of the 1,100 were refused too.
    assert refused_idle >= IDLE - NOFILE, refused_idle
    assert series.get('{reason="max_connections"}', 0) >= LATE + IDLE - NOFILE, series
    warnings = [line for line in log.splitlines()
                if " WARNING " in line and "max_connections" in line]
    assert 1 <= len(warnings) <= 3, warnings  # logged, and rate-limited
