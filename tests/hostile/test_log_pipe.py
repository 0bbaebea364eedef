"""A log reader that stops reading stalls no request.

``humpyard serve`` logs to stderr, which in production is a pipe: to journald,
a container runtime, a log shipper, or a terminal paused with Ctrl-S. Seen by
running it with stderr on a pipe nobody read: after a few hundred requests the
pipe was full, the next write of the log buffer blocked the event loop, and
every request (health checks and `/metrics` too) waited for the reader, for
ever. The log is now written by a thread of its own from a bounded queue; what
does not fit is dropped, whole lines, and counted
(``humpyard_log_lines_dropped_total``), and once the reader takes lines again a
WARNING says how many were lost. A stop does not wait for a stalled reader
longer than the exit's bound.
"""

from __future__ import annotations

import fcntl
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.hostile.clients_support import MODEL, connect, scrape, wait_until, write_config
from tests.support.fake_upstream import FakeUpstream
from tests.support.polling import until
from tests.support.servers import free_port
from tests.support.steps import status

ROOT = Path(__file__).resolve().parents[2]
F_SETPIPE_SZ = 1031
BODY = b'{"model":"%s","messages":[{"role":"user","content":"hi"}]}' % MODEL.encode()
REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
           b"\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)


def _burst(port: int, connections: int, each: int, deadline: float) -> int:
    """``connections`` × ``each`` pipelined requests; the answers that came in time."""
    answered = [0] * connections

    def one(i: int) -> None:
        s = connect(port)
        try:
            s.sendall(REQUEST * each)
            got = b""
            while got.count(b"HTTP/1.1 200 ") < each and time.monotonic() < deadline:
                s.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    data = s.recv(1 << 20)
                except TimeoutError:
                    break
                if not data:
                    break
                got += data
            answered[i] = got.count(b"HTTP/1.1 200 ")
        finally:
            s.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(answered)


@contextmanager
def _serving_into_a_pipe(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, int]]:
    """``humpyard serve`` with stdout and stderr on a 4 KiB pipe: the child, its URL and
    the pipe's read end (nobody reads it unless the test does). The test stops the
    child; one still running at the end is killed."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    url = f"http://127.0.0.1:{port}"
    with FakeUpstream() as up:
        cfg = write_config(tmp_path, up.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "humpyard.cli", "serve", "--config", str(cfg),
             "--port", str(port)], cwd=str(ROOT), env=env, stdout=write_end, stderr=write_end)
        os.close(write_end)
        try:
            def started() -> bool:
                try:
                    return httpx.get(url + "/healthz", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False
            assert wait_until(started, 20)
            yield proc, url, read_end
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(read_end)


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """SIGTERM: the exit code and how long it took."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    return code, time.monotonic() - began


def test_a_log_reader_that_stops_reading_stalls_no_request(tmp_path: Path) -> None:
    with _serving_into_a_pipe(tmp_path) as (proc, url, read_end):
        port = int(url.rsplit(":", 1)[1])
        # Nobody reads the log: 12,000 requests write ~2.7 MB of request lines.
        answered = _burst(port, 8, 1500, time.monotonic() + 60)
        dropped = scrape(url, "humpyard_log_lines_dropped_total")
        # The reader comes back: the lines flow again, with word of what was lost.
        taken: list[bytes] = []
        reader = threading.Thread(target=lambda: _read_all(read_end, taken), daemon=True)
        reader.start()
        after = httpx.post(url + "/v1/chat/completions", content=BODY, timeout=10,
                           headers={"content-type": "application/json"})
        rid = after.headers["x-humpyard-request-id"].encode()
        assert wait_until(lambda: rid in b"".join(taken), 10), b"".join(taken)[-2000:]
        code, _ = _stop(proc)
        log = b"".join(taken)
    assert answered == 12_000, answered
    assert dropped.get("") and dropped[""] > 0, dropped
    assert b"log lines were dropped" in log, log[-3000:]
    lines = log.split(b"\n")
    assert all(not line or line[:2] == b"20" or line.startswith(b"    ") for line in lines), \
        [line for line in lines if line and line[:2] != b"20"][:3]  # whole lines only
    assert code == 0


def test_a_stop_does_not_wait_for_a_log_reader_that_never_reads(tmp_path: Path) -> None:
    with _serving_into_a_pipe(tmp_path) as (proc, url, _):
        # ~460 KB of lines: the queue holds them, the 4 KiB pipe does not.
        assert _burst(int(url.rsplit(":", 1)[1]), 4, 500, time.monotonic() + 60) == 2000
        code, took = _stop(proc)
    assert code == 0
    assert took < 15, took


def _read_all(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            return
        if not data:
            return
        into.append(data)


def test_a_log_file_that_was_full_is_written_again_once_it_has_room(tmp_path: Path) -> None:
    """stderr into a file (``2>> humpyard.log``, ``nohup``) whose disk fills, and then has
    room again (here a file size limit, lifted from outside: each write past it fails
    with EFBIG, as one on a full disk fails with ENOSPC). Before: the first failed write
    took the log for a closed stderr, and nothing was logged again for the rest of the
    process's life. Now the lines that could not be written are dropped and counted,
    and the log goes on once there is room."""
    limit = 64 << 10

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    def dropped() -> float:
        return sum(scrape(proc.url, "humpyard_log_lines_dropped_total").values())

    log = tmp_path / "serve.log"
    with FakeUpstream() as up, FakeUpstream() as broken:
        broken.default = status(500)
        cfg = tmp_path / "humpyard.toml"  # no ledger: only the log grows
        cfg.write_text(f'[providers.p]\nbase_url = "{up.url}"\n[targets.{MODEL}]\n'
                       f'endpoints = [{{ provider = "p", model = "m" }}]\n'
                       f'[providers.b]\nbase_url = "{broken.url}"\n[targets.broken]\n'
                       f'endpoints = [{{ provider = "b", model = "m" }}]\n')
        proc = ServeProcess(cfg, log, preexec_fn=limit_file_size).start()
        sent: list[str] = []
        try:
            with httpx.Client(base_url=proc.url, timeout=30) as client:
                def chat() -> str:
                    r = client.post("/v1/chat/completions", content=BODY,
                                    headers={"content-type": "application/json"})
                    assert r.status_code == 200, r.text
                    sent.append(r.headers["x-humpyard-request-id"])
                    return sent[-1]

                until(lambda: chat() and log.stat().st_size >= limit,
                      "the log file to reach its limit", timeout=60, step=0)
                def failed() -> bool:  # a WARNING line: the log drains (and reports)
                    r = client.post("/v1/chat/completions", json={
                        "model": "broken", "messages": [{"role": "user", "content": "hi"}]})
                    sent.append(r.headers["x-humpyard-request-id"])  # its lines count too
                    return r.status_code >= 500

                until(lambda: chat() and failed() and dropped() >= 20,
                      "lines to be dropped", step=0)
                resource.prlimit(proc.pid, resource.RLIMIT_FSIZE,
                                 (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                after = until(lambda: (rid := chat()) in proc.output() and rid,
                              "a request logged once there is room", timeout=30)
                counted = dropped()
        finally:
            proc.stop()
    text = proc.output()
    missing = [rid for rid in sent if rid not in text]
    # lost while full, none after (a failed request may write more than one line, so
    # the lines counted are not a count of requests)
    assert missing and missing[-1] < after
    assert counted >= 20
    # said once there is room, all of them: a report while the disk was full was lost
    # with the lines it counted
    reported = [int(n) for n in re.findall(r"(\d+) log lines were dropped", text)]
    assert sum(reported) == counted, (reported, counted)
