"""A provider that goes silent is cut by the first-byte and idle timeouts, not the total.

A real ``humpyard serve`` child; ``[router] idle_timeout_secs`` and one provider's
``first_byte_timeout_secs`` are short (0.5 s) while ``timeout_secs`` stays at its
600 s default, so only the new limits can end these waits:

- no answer head on a streamed call: ``FirstByteTimeout``, failover (class ``timeout``);
- a head and a content-less event, then silence: ``IdleTimeout``, failover;
- a buffered body that stops half-way: ``IdleTimeout``, failover;
- silence after the first content: the client's stream ends with an error event;
- keep-alive comments more often than the idle limit keep a slow stream alive.

A probe client's latency stays flat throughout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.durability.process import ServeProcess
from tests.hostile.upstream_server import HOLD, HostileUpstream, head, hostile_config, wait_decision
from tests.support.fake_upstream import FakeUpstream
from tests.support.probe import Probe

LIMIT = 0.5
SLACK = 1.5  # a loaded 2-core machine: the cut comes within the limit + this
ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"partial "}}]}\n\n'
FINISH = (b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
          b"data: [DONE]\n\n")


def no_head() -> Iterator[object]:
    yield HOLD


def silent_before_content() -> Iterator[object]:
    yield head(200, "text/event-stream") + ROLE
    yield HOLD


def silent_after_content() -> Iterator[object]:
    yield head(200, "text/event-stream") + ROLE + CONTENT
    yield HOLD


def body_stops() -> Iterator[object]:
    yield head(200, "application/json", length=1000) + b'{"choices":['
    yield HOLD


def slow_but_alive() -> Iterator[object]:
    yield head(200, "text/event-stream") + ROLE
    for _ in range(6):  # 1.2 s in all, never LIMIT without a byte
        yield 0.2
        yield b": thinking\n\n"
    yield CONTENT + FINISH


ANSWERS = {"nohead": no_head, "silentbefore": silent_before_content,
           "silentafter": silent_after_content, "bodystops": body_stops,
           "alive": slow_but_alive}


def config(tmp: Path, hostile: HostileUpstream, good: str) -> Path:
    return hostile_config(tmp, hostile, good, ANSWERS,
                          top=f"[router]\nidle_timeout_secs = {LIMIT}",
                          provider_extra=lambda kind: (f"first_byte_timeout_secs = {LIMIT}"
                                                       if kind == "nohead" else ""))


class Bed:
    def __init__(self, server: ServeProcess, hostile: HostileUpstream, probe: Probe):
        self.server, self.hostile, self.probe = server, hostile, probe
        self.http = httpx.Client(base_url=server.url, timeout=30)
        probe.measure(30)  # warm

    def send(self, kind: str, *, stream: bool) -> tuple[httpx.Response, list[str], float]:
        """One request while the probe runs (flat, or played once more)."""
        return self.probe.flat_during(lambda: self._send_once(kind, stream))

    def _send_once(self, kind: str, stream: bool) -> tuple[httpx.Response, list[str], float]:
        body: dict[str, Any] = {"model": kind, "messages": [{"role": "user", "content": "x"}]}
        if stream:
            body["stream"] = True
        before = self.hostile.hits[kind]
        started = time.monotonic()
        with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = [ln for ln in r.iter_lines() if ln]
        elapsed = time.monotonic() - started
        assert self.hostile.hits[kind] == before + 1
        return r, lines, elapsed

    def decision(self, request_id: str) -> dict[str, Any]:
        return wait_decision(self.http, request_id)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    tmp = tmp_path_factory.mktemp("hostile-stalls")
    with HostileUpstream(ANSWERS) as hostile, FakeUpstream() as good, \
            ServeProcess(config(tmp, hostile, good.url + "/v1"), tmp / "serve.log",
                         log_level="WARNING") as server, \
            Probe(server.url, "ok") as probe:
        bed = Bed(server, hostile, probe)
        try:
            yield bed
        finally:
            bed.http.close()


@pytest.mark.parametrize(("kind", "stream", "says"), [
    ("nohead", True, "first byte timeout"),
    ("silentbefore", True, "idle timeout"),
    ("bodystops", False, "idle timeout"),
], ids=["no-head", "silent-before-content", "buffered-body-stops"])
def test_silence_before_the_first_content_fails_over(bed: Bed, kind: str, stream: bool,
                                                      says: str) -> None:
    resp, lines, elapsed = bed.send(kind, stream=stream)
    assert resp.status_code == 200 and resp.headers["x-humpyard-target"] == "good"
    assert LIMIT * 0.9 < elapsed < LIMIT + SLACK
    if stream:
        assert lines[-1] == "data: [DONE]" and not any("error" in ln for ln in lines)
    dec = bed.decision(resp.headers["x-humpyard-request-id"])
    tried = [(a["target"], a["failure_class"]) for a in dec["attempts"]]
    assert tried == [(kind, "timeout"), ("good", None)]
    assert says in dec["attempts"][0]["error"] and dec["status"] == 200


def test_silence_after_the_first_content_ends_the_stream(bed: Bed) -> None:
    resp, lines, elapsed = bed.send("silentafter", stream=True)
    assert resp.status_code == 200 and resp.headers["x-humpyard-target"] == "silentafter"
    assert LIMIT * 0.9 < elapsed < LIMIT + SLACK
    assert any("partial" in ln for ln in lines)
    assert json.loads(lines[-1].removeprefix("data: "))["error"]["code"] == "stream_broken"
    dec = bed.decision(resp.headers["x-humpyard-request-id"])
    assert dec["outcome"] == "stream_broken" and "idle timeout" in dec["error"]


def test_a_slow_stream_that_keeps_talking_is_not_cut(bed: Bed) -> None:
    resp, lines, elapsed = bed.send("alive", stream=True)
    assert resp.status_code == 200 and elapsed > 1.0 and lines[-1] == "data: [DONE]"
    assert any("partial" in ln for ln in lines)
    # its first content came after 1 s: the head went out early, without the target
    # header, and the gateway's own comments came first (ADR 0020); the decision has it
    assert "x-humpyard-target" not in resp.headers and lines[0] == ": keep-alive"
    dec = bed.decision(resp.headers["x-humpyard-request-id"])
    assert dec["target"] == "alive" and dec["outcome"] == "ok"
