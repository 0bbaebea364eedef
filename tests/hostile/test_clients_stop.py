"""SIGTERM and SIGINT end ``humpyard serve`` with exit status 0, the log and the
ledger written out.

Issue 24, case 9: a stopped ``serve`` exited by the signal (-15: uvicorn raised
it again on the way out) and lost the log lines still buffered; in 2 of 6
quick stops the whole log was empty. Six quick start/stop cycles here, each
with one request, alternating the two signals.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.durability.process import ROOT, ServeProcess
from tests.hostile.clients_support import MODEL, write_config
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import delay

CYCLES = 6


def test_quick_stops_exit_0_with_the_whole_log_and_ledger(tmp_path: Path) -> None:
    with FakeUpstream() as up:
        cfg = write_config(tmp_path, up.url)
        for i in range(CYCLES):
            sig = signal.SIGTERM if i % 2 == 0 else signal.SIGINT
            log = tmp_path / f"serve-{i}.log"
            server = ServeProcess(cfg, log).start()
            try:
                r = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                               json={"model": MODEL,
                                     "messages": [{"role": "user", "content": f"cycle {i}"}]})
                assert r.status_code == 200
                request_id = r.headers["x-humpyard-request-id"]
                assert server.proc is not None
                server.proc.send_signal(sig)
                code = server.proc.wait(15)
            finally:
                server.kill()
            text = log.read_text()
            assert code == 0, (sig, code, text[-2000:])
            assert "humpyard serving on" in text, text
            assert f"request_id={request_id}" in text, (sig, text)
            assert text.rstrip().endswith("humpyard stopped"), (sig, text[-500:])
            with sqlite3.connect(tmp_path / "ledger.db") as db:
                ids = {row[0] for row in db.execute("SELECT request_id FROM decisions")}
            assert request_id in ids, (sig, i)


def _catches(pid: int, sig: int) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (``SigCgt`` in ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _stopped_while_starting(tmp_path: Path, log: Path, sig: int, moment: float = 0.0,
                            *extra: str) -> tuple[int, str]:
    """A ``serve`` (``extra`` arguments added) sent ``sig`` ``moment`` seconds after it
    first catches SIGTERM: its exit status and its log."""
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "humpyard.cli", "serve", "--config",
                                 str(cfg), "--port", "0", *extra], cwd=str(ROOT), env=env,
                                stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 15
        while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(moment)
        proc.send_signal(sig)
        code = proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, log.read_text()


def test_a_signal_while_starting_still_exits_0(tmp_path: Path) -> None:
    """Stopped as soon as ``serve`` has its handlers, before it listens (the
    configuration and the app still loading): exit 0 all the same."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        code, text = _stopped_while_starting(tmp_path, tmp_path / f"serve-{sig.name}.log", sig)
        assert code == 0, (sig, text[-3000:])


STARTUP_MOMENTS = [i * 0.04 for i in range(10)]
"""When, after ``serve`` first holds the signals, the signal comes: across the rest of
its imports, the configuration, the store and the lifespan (~0.2 s here)."""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_at_any_moment_of_the_start_stops_it_cleanly(tmp_path: Path,
                                                               sig: signal.Signals) -> None:
    """Before: a signal during the start was a ``KeyboardInterrupt`` at whatever line the
    start had reached. A SIGINT then cancelled the lifespan and logged its traceback
    as an ERROR (at almost every moment of the start), and a SIGTERM at some moments
    ended the process by SIGINT (exit -2). Now the first signal is held until ``serve``
    owns the signals, and it stops through the graceful path."""
    for i, moment in enumerate(STARTUP_MOMENTS):
        code, text = _stopped_while_starting(tmp_path, tmp_path / f"serve-{i}.log", sig,
                                             moment)
        assert code == 0, (moment, code, text[-3000:])
        assert "Traceback" not in text and " ERROR " not in text, (moment, text[-3000:])


def test_a_signal_while_the_workers_parent_starts_starts_no_worker(tmp_path: Path) -> None:
    """``serve --workers 2`` stopped while its parent is still starting (loading what
    it runs): it exits 0 and starts no worker. Before, the signal found no handler of
    the parent's yet and ended it by SIGTERM (exit -15)."""
    code, text = _stopped_while_starting(tmp_path, tmp_path / "serve.log", signal.SIGTERM,
                                         0.0, "--workers", "2")
    assert code == 0, (code, text[-3000:])
    assert "worker 0 started" not in text and "Traceback" not in text, text[-3000:]
    assert "serving on" not in text, text[-3000:]  # it never served


def test_a_second_signal_stops_without_waiting_for_open_requests(tmp_path: Path) -> None:
    """The first SIGTERM waits for a request still running; a second one does not,
    and the exit is still 0 with the log written."""
    import threading

    with FakeUpstream() as up:
        up.script(delay(30))
        cfg = write_config(tmp_path, up.url)
        server = ServeProcess(cfg, tmp_path / "serve.log").start()
        assert server.proc is not None
        errors: list[BaseException] = []
        answers: list[httpx.Response] = []

        def slow() -> None:
            try:
                answers.append(httpx.post(server.url + "/v1/chat/completions", timeout=20,
                                          json={"model": MODEL, "messages": [
                                              {"role": "user", "content": "slow"}]}))
            except httpx.HTTPError as e:
                errors.append(e)

        t = threading.Thread(target=slow, daemon=True)
        t.start()
        try:
            assert up.wait_for_requests(1, 10)
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(1.0)
                raise AssertionError("the first signal did not wait for the open request")
            except subprocess.TimeoutExpired:
                pass
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(10)
        finally:
            server.kill()
        t.join(20)
    assert code == 0
    assert server.output().rstrip().endswith("humpyard stopped")
    # The stopped request: its client was told 503 in its protocol's shape and it is
    # recorded as such. It got uvicorn's plain-text 500, was recorded as a client that
    # left (499), and the log held a CancelledError's trace.
    assert "Traceback" not in server.output(), server.output()[-3000:]
    assert not errors and len(answers) == 1, (errors, answers)
    [answer] = answers
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "server_stopping"
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        assert db.execute("SELECT request_id, status FROM decisions").fetchall() == [
            (answer.headers["x-humpyard-request-id"], 503)]


def test_requests_still_open_after_the_stop_timeout_are_stopped(tmp_path: Path) -> None:
    """SIGTERM waited for every open request however long it ran (a 15-minute stream
    held the stop for 15 minutes, and ``serve --workers`` killed a worker still busy
    after 60 s, its ledger's last second and its open requests unrecorded). After
    ``[server] stop_timeout_secs`` the requests still open are stopped: a streamed one
    ends, a buffered one is answered 503, each is recorded as a 503, and the exit is
    0 with the log and the ledger written."""
    import threading

    with FakeUpstream() as up:
        up.script(delay(60), delay(60))
        cfg = write_config(tmp_path, up.url, "stop_timeout_secs = 1")
        server = ServeProcess(cfg, tmp_path / "serve.log").start()
        assert server.proc is not None
        answers: list[tuple[int, str]] = []
        head = threading.Event()  # the stream's early 200 head is out (after 1 s)

        def ask(stream: bool) -> None:
            with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=90, json={
                    "model": MODEL, "stream": stream,
                    "messages": [{"role": "user", "content": "slow"}]}) as r:
                if stream:
                    head.set()
                answers.append((r.status_code, r.read().decode()))

        threads = [threading.Thread(target=ask, args=(s,), daemon=True) for s in (False, True)]
        for t in threads:
            t.start()
        try:
            assert up.wait_for_requests(2, 10) and head.wait(10)
            started = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(30)
            took = time.monotonic() - started
        finally:
            server.kill()
        for t in threads:
            t.join(10)
    log = server.output()
    assert code == 0, log[-3000:]
    assert took < 20, took  # the requests would have taken 60 s
    assert "still open 1 s after the stop" in log and "Traceback" not in log, log[-3000:]
    statuses = sorted(status for status, _ in answers)
    # the buffered one: 503; the stream: its 200 head (sent early, before the first
    # content) and then its end
    assert statuses == [200, 503], answers
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        assert sorted(s for (s,) in db.execute("SELECT status FROM decisions")) == [503, 503]


def test_a_stop_does_not_wait_for_a_refused_body_still_arriving(tmp_path: Path) -> None:
    """A body refused from its ``Content-Length`` (413) on a keep-alive connection,
    still arriving when SIGTERM comes: the stop's close of the connection drained
    the body like any close while one arrives, so the exit waited for
    ``body_timeout_secs`` (60.6 s seen). A stopping server's closes are closes."""
    import socket
    import threading

    with FakeUpstream() as up:
        server = ServeProcess(write_config(tmp_path, up.url), tmp_path / "serve.log").start()
        assert server.proc is not None
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        stop, going = threading.Event(), threading.Event()

        def trickle() -> None:
            sent = 0
            while not stop.is_set():
                try:
                    s.sendall(bytes(1000))
                except OSError:
                    return
                sent += 1
                if sent == 5:
                    going.set()
                stop.wait(0.05)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 500000000\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 413 ")
            t = threading.Thread(target=trickle, daemon=True)
            t.start()
            assert going.wait(10)  # the body goes on arriving after its answer
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(15)
        finally:
            stop.set()
            s.close()
            server.kill()
    assert code == 0


def test_a_stream_the_server_stops_ends_with_its_protocols_error(tmp_path: Path) -> None:
    """Streams with content out when ``stop_timeout_secs`` passes. Each ended with
    the last content and no more: the ``openai`` SDK took the chat stream as
    complete, and the ``anthropic`` SDK a message without ``message_stop``, so a
    client could not tell a cut answer from a whole one. Each now ends with its
    protocol's own error event, as a stream whose upstream broke does: the SDKs
    raise, and a Responses client (Codex) sees ``error`` and ``response.failed``."""
    import threading

    import anthropic
    import openai

    from tests.support.steps import stream_then_stall

    ask = [{"role": "user", "content": "slow"}]
    with FakeUpstream() as up:
        up.default = stream_then_stall(("partial ",))
        cfg = write_config(tmp_path, up.url, "stop_timeout_secs = 1")
        server = ServeProcess(cfg, tmp_path / "serve.log").start()
        assert server.proc is not None
        base = server.url + "/v1"
        seen: dict[str, list[str]] = {}  # what each client read, then how it ended
        content = threading.Barrier(4)
        numbers: list[int] = []  # the Responses events' sequence numbers

        def chat() -> None:
            c = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
            got = seen.setdefault("chat", [])
            try:
                for chunk in c.chat.completions.create(model=MODEL, messages=ask, stream=True):
                    if chunk.choices and chunk.choices[0].delta.content:
                        got.append(chunk.choices[0].delta.content)
                        content.wait(10)
                got.append("ended")
            except openai.APIError as e:
                got.append(f"raised: {e.message}")

        def messages() -> None:
            c = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
            got = seen.setdefault("messages", [])
            try:
                with c.messages.stream(model=MODEL, max_tokens=50, messages=ask) as s:
                    for text in s.text_stream:
                        got.append(text)
                        content.wait(10)
                got.append("ended")
            except anthropic.APIStatusError as e:
                got.append(f"raised: {e.message}")

        def responses() -> None:
            c = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
            got = seen.setdefault("responses", [])
            for event in c.responses.create(model=MODEL, input="slow", stream=True):
                got.append(event.type)
                numbers.append(event.sequence_number)
                if event.type == "response.output_text.delta":
                    content.wait(10)
            got.append("ended")

        threads = [threading.Thread(target=f, daemon=True) for f in (chat, messages, responses)]
        for t in threads:
            t.start()
        try:
            content.wait(20)  # every stream has content out
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(30)
        finally:
            server.kill()
        for t in threads:
            t.join(10)
    log = server.output()
    assert code == 0 and "Traceback" not in log, log[-3000:]
    stopped = "the gateway stopped before the answer was complete"
    assert seen["chat"][0] == "partial " and seen["chat"][-1].startswith("raised: "), seen
    assert stopped in seen["chat"][-1], seen
    assert seen["messages"][0] == "partial ", seen
    assert seen["messages"][-1].startswith("raised: ") and stopped in seen["messages"][-1], seen
    assert "response.output_text.delta" in seen["responses"], seen
    assert seen["responses"][-3:] == ["error", "response.failed", "ended"], seen
    # one stream to its end: begun once, numbered on from where it was
    assert seen["responses"].count("response.created") == 1, seen
    assert numbers == list(range(len(numbers))), numbers
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        assert sorted(s for (s,) in db.execute("SELECT status FROM decisions")) == [503] * 3
