"""What the hostile-client tests share: a ``humpyard serve`` child on a fake upstream,
raw sockets, and the child's CPU time.

Each test runs the real CLI (``tests/durability/process.py:ServeProcess``) and
talks to it over loopback sockets, the way an attacker would: no HTTP library
between the test and the bytes on the wire.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess, SimulatorProcess
from tests.support.fake_upstream import FakeUpstream

MODEL = "t"


def write_config(tmp: Path, upstream: str, server: str = "") -> Path:
    """A gateway on ``upstream`` with a ledger, and ``server`` as its ``[server]`` table
    (nothing: the defaults)."""
    path = tmp / "humpyard.toml"
    path.write_text(f"""
[ledger]
path = "{tmp / 'ledger.db'}"
[providers.p]
base_url = "{upstream}"
[targets.{MODEL}]
endpoints = [{{ provider = "p", model = "m" }}]
{"[server]" if server else ""}
{server}
""")
    return path


@contextmanager
def serving(tmp: Path, server: str = "", *,
            preexec_fn: Callable[[], object] | None = None,
            log_level: str = "INFO") -> Iterator[tuple[ServeProcess, FakeUpstream]]:
    """A fake upstream and a ``humpyard serve`` child in front of it."""
    with FakeUpstream() as up:
        cfg = write_config(tmp, up.url, server)
        proc = ServeProcess(cfg, tmp / "serve.log", preexec_fn=preexec_fn, log_level=log_level)
        with proc:
            yield proc, up


@contextmanager
def serving_apart(tmp: Path, server: str = "", *,
                  preexec_fn: Callable[[], object] | None = None) -> Iterator[ServeProcess]:
    """``humpyard serve`` in front of a simulated provider in a process of its own, so
    that an attack run from the test's process cannot slow the upstream down."""
    with SimulatorProcess(tmp / "simulator.log") as sim:
        cfg = write_config(tmp, sim.url, server)
        proc = ServeProcess(cfg, tmp / "serve.log", preexec_fn=preexec_fn)
        with proc:
            yield proc


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def read_answer(s: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes (or ``timeout``); raises
    ``ConnectionResetError`` on a reset."""
    s.settimeout(timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = s.recv(65536)
        except TimeoutError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def closed_by_peer(s: socket.socket) -> bool:
    """True once the server has closed ``s`` (EOF or reset), without blocking."""
    if not readable(s):
        return False
    try:
        return s.recv(65536, socket.MSG_PEEK) == b"" or _drain_to_eof(s)
    except (ConnectionResetError, BrokenPipeError):
        return True


def readable(s: socket.socket, timeout: float = 0) -> bool:
    """Whether ``s`` has something to read (or its end), within ``timeout`` seconds
    (``poll``: the test process may hold more than 1,024 descriptors)."""
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(timeout * 1000))


def _drain_to_eof(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    finally:
        s.setblocking(True)


def cpu_secs(pid: int) -> float:
    """User plus system CPU time ``pid`` has used, in seconds (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def scrape(url: str, name: str) -> dict[str, float]:
    """The series of metric ``name`` on ``GET /metrics``: labels as written → value."""
    r = httpx.get(url + "/metrics", timeout=5)
    assert r.status_code == 200
    out = {}
    for line in r.text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key[len(name):]] = float(value)
    return out


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
