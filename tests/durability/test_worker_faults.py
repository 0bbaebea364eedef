"""``humpyard serve --workers 2`` when a worker dies holding shared state, when the
file is reloaded with another store, and when the set stops.

Each test runs the real command (``ServeProcess``) in front of ``FakeUpstream``s
over real sockets, as ``test_workers.py`` does (its helpers are reused):

- a worker killed while it probes a half-open endpoint: its probe lease is given
  back by the parent, so the next request of any worker probes (it used to block
  every probe for the lease's 660 s, the endpoint unused though healthy);
- a reload naming another ledger file, then a worker's death: the new worker
  keeps the file the run opened (it used to open the new one, and the workers
  counted limits in two files: a limit of 5 served 10);
- a stop while a request is still open: a new connection is refused at once,
  not left waiting in the listening queue until the last worker is gone.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.durability.test_workers import (
    _quietly,
    _rows,
    bad_then_good,
    children,
    kill_one_worker,
    poll,
    post,
    start,
    target,
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


def test_a_reload_naming_another_ledger_keeps_the_runs_file_for_a_restarted_worker(
        tmp_path: Path):
    """A reload whose file names another ``[ledger] path``, then a worker's death: the
    new worker opened the new path while its peer kept the old one, so the two
    counted a key's limits (and budgets, breakers, decisions) in two files, and
    ``rpm_limit = 5`` served 10. A change of store takes a restart, for workers as
    for one process: every worker keeps the file the run opened, and the reload
    says so."""
    with FakeUpstream() as up:
        cfg = write_config(tmp_path, target(up.url) + """
[keys.lim]
key_env = "LIM"
rpm_limit = 5
""")
        from tests.durability.process import ServeProcess
        server = ServeProcess(cfg, tmp_path / "serve.log", args=("--workers", "2"),
                              env={"LIM": "lim-secret"}).start()
        try:
            poll(lambda: server.output().count("Application startup complete") == 2,
                 what="both workers to serve")
            other = tmp_path / "other.db"
            cfg.write_text(cfg.read_text().replace(str(tmp_path / "ledger.db"), str(other)))
            os.kill(server.pid, signal.SIGHUP)
            poll(lambda: server.output().count("configuration reloaded") == 2,
                 what="both workers to reload")
            kill_one_worker(server)
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda _: post(server.url, "t", "lim-secret"),
                                        range(20)))
            assert sorted(r.status_code for r in answers) == [200] * 5 + [429] * 15
            assert not other.exists()
            assert server.output().count("a change to the store takes a restart") == 1
        finally:
            assert server.stop() == 0
    served = _rows(tmp_path / "ledger.db", "SELECT count(*) FROM decisions WHERE status = 200")
    assert served == [(5,)]


def test_a_new_connection_during_a_stop_is_refused_at_once(tmp_path: Path):
    """SIGTERM while a request is open: the workers stop accepting and drain, but the
    parent still held the listening socket, so the kernel kept queueing new
    connections nobody would accept. A client waited until the drain ended (up to
    ``stop_timeout_secs``, 60 s by default), then was reset; one process refuses at
    once. The parent now lets the socket go as it passes the stop on."""
    with FakeUpstream() as up:
        up.default = delay(8, ok("slow"))
        cfg = write_config(tmp_path, target(up.url))
        server = start(cfg, tmp_path)
        answers: list[httpx.Response] = []
        held = threading.Thread(target=lambda: answers.append(post(server.url)),
                                daemon=True)
        try:
            held.start()
            poll(lambda: len(up.requests_to("/v1/chat/completions")) == 1,
                 what="the request in flight")
            os.kill(server.pid, signal.SIGTERM)
            poll(lambda: server.output().count("Waiting for") >= 1
                 or "Shutting down" in server.output(), what="the workers to stop")
            port = _port_of(server.url)

            def refused() -> bool:
                with socket.socket() as s:
                    s.settimeout(1.0)
                    try:
                        s.connect(("127.0.0.1", port))
                        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                        s.recv(1)  # queued, never accepted: this times out
                    except (ConnectionRefusedError, ConnectionResetError):
                        return True
                    except TimeoutError:
                        return False
                    return False

            poll(refused, timeout=5, what="a new connection to be refused")
            assert held.is_alive() or answers, "the open request was cut"
            held.join(20)
            assert [r.status_code for r in answers] == [200]
        finally:
            try:
                assert server.proc is not None and server.proc.wait(30) == 0
            finally:
                server.kill()
