"""``humpyard serve --workers 2`` when a worker dies holding shared state.

Each test runs the real command (``ServeProcess``) in front of ``FakeUpstream``s
over real sockets, as ``test_workers.py`` does (its helpers are reused):

- a worker killed while it probes a half-open endpoint: its probe lease is given
  back by the parent, so the next request of any worker probes (it used to block
  every probe for the lease's 660 s, the endpoint unused though healthy).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from tests.durability.test_workers import (
    _quietly,
    bad_then_good,
    children,
    poll,
    post,
    start,
    write_config,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import delay, ok, reset


def _port_of(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def _connected_to(pids: list[int], port: int) -> list[int]:
    """Those of ``pids`` holding an established TCP connection to ``port`` on the
    loopback (``/proc``: the sockets of the namespace, then each process's own)."""
    wanted = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
            wanted.add(f"socket:[{fields[9]}]")
    found = []
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        links = set()
        for fd in fds.iterdir():
            try:
                links.add(os.readlink(fd))
            except OSError:  # closed meanwhile
                pass
        if links & wanted:
            found.append(pid)
    return found


def test_a_killed_workers_probe_lease_is_given_back(tmp_path: Path):
    """The worker that holds a half-open endpoint's probe is killed mid-probe. Its
    lease used to stay in the file for the lease's whole length (the longest timeout
    plus 60 s: 660 s by default), and no worker probed the endpoint meanwhile, though
    it was well again: every request went to the fallback. The parent now gives the
    lease back as it notices the death, and the next request probes."""
    with FakeUpstream() as bad, FakeUpstream() as good:
        cfg = write_config(tmp_path, bad_then_good(bad.url, good.url, 1))
        server = start(cfg, tmp_path)
        probing = threading.Thread(target=lambda: _quietly(lambda: post(server.url, "r")),
                                   daemon=True)
        try:
            bad.script(reset())  # a failure that leaves no kept connection
            assert post(server.url, "r").headers["x-humpyard-target"] == "good"  # trips
            tripped = time.monotonic()
            bad.default = delay(60, ok("late"))  # the probe: still running when killed
            poll(lambda: time.monotonic() - tripped > 1.3, what="the cooldown's end")
            probing.start()
            poll(lambda: len(bad.requests_to("/v1/chat/completions")) == 2,
                 what="the probe to reach the endpoint")
            # the other requests skip it while the probe runs, on either worker
            answers = [post(server.url, "r") for _ in range(4)]
            assert {r.headers["x-humpyard-target"] for r in answers} == {"good"}
            (prober,) = _connected_to(children(server.pid), _port_of(bad.url))
            bad.default = ok("well again")
            os.kill(prober, signal.SIGKILL)
            seen: list[str] = []

            def probed() -> bool:
                seen.append(post(server.url, "r").headers["x-humpyard-target"])
                return seen[-1] == "bad"

            poll(probed, timeout=10, what="a request to probe the endpoint again")
            assert len(bad.requests_to("/v1/chat/completions")) == 3
            assert "and 1 probe lease(s)" in server.output()
        finally:
            assert server.stop() == 0
