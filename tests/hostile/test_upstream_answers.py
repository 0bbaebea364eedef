"""A hostile upstream's answers cannot take the gateway's memory or its event loop.

A real ``humpyard serve`` child with the DEFAULT limits (nothing about them in its
file: the defaults must protect) routes each attack's model to a hostile provider
first and a good one second (``tests/hostile/upstream_server.py``). Each attack:

- a 1 GiB gzip bomb (about 1 MB on the wire) on a 200, on a 500 and on an event
  stream (content-less events, held back), a plain body of 1 GiB with no length,
  and an event-stream line that never ends (from an OpenAI and an Anthropic
  provider);

must fail over to the good provider before anything reached the client, be
recorded as a failed attempt of its own failure class, leave a probe client's
latency flat, and leave the gateway's peak RSS within its idle figure + 250 MB
(before the limits, the buffered bomb alone took it past 2 GB). After the
first content, an endless line ends the client's stream with an error event.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.durability.process import ServeProcess
from tests.hostile.upstream_server import (
    HostileUpstream,
    gzip_bomb,
    head,
    hostile_config,
    pieces,
    repeated,
    wait_decision,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.probe import Probe, peak_rss_mb, rss_mb

GiB = 1 << 30
RSS_BUDGET_MB = 250
PROBE_SECS = 1.5  # the probe runs at least this long per attack
ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"partial "}}]}\n\n'


def bomb_200() -> Iterator[bytes]:
    body = gzip_bomb(GiB)
    yield head(200, "application/json", "content-encoding: gzip", length=len(body))
    yield from pieces(body)


def bomb_500() -> Iterator[bytes]:
    body = gzip_bomb(GiB)
    yield head(500, "application/json", "content-encoding: gzip", length=len(body))
    yield from pieces(body)


EVENTS = ROLE * ((1 << 20) // len(ROLE))


def bomb_stream() -> Iterator[bytes]:
    body = gzip_bomb(len(EVENTS) * 1024, EVENTS)  # ~1 GiB of events without content
    yield head(200, "text/event-stream", "content-encoding: gzip")
    yield from pieces(body)


def plain_huge() -> Iterator[bytes]:
    yield head(200, "application/json")  # no length: the body ends at the close
    yield b'{"choices":[{"message":{"content":"'
    yield from repeated(b"a" * (1 << 16), GiB)


def endless_line() -> Iterator[bytes]:
    yield head(200, "text/event-stream")
    yield b"data: "
    yield from repeated(b"a" * (1 << 16), GiB)


def endless_line_after_content() -> Iterator[bytes]:
    yield head(200, "text/event-stream")
    yield ROLE + CONTENT
    yield b"data: "
    yield from repeated(b"a" * (1 << 16), GiB)


def anthropic_endless() -> Iterator[bytes]:
    yield head(200, "text/event-stream")
    yield b'event: message_start\ndata: {"type":"message_start","message":{"usage":{}}}\n\n'
    yield b"event: ping\ndata: "
    yield from repeated(b"a" * (1 << 16), GiB)


ANSWERS = {"bomb200": bomb_200, "bomb500": bomb_500, "bombstream": bomb_stream,
           "plain": plain_huge, "endless": endless_line,
           "endlessafter": endless_line_after_content, "anthropic": anthropic_endless}


def config(tmp: Path, hostile: HostileUpstream, good: str) -> Path:
    return hostile_config(tmp, hostile, good, ANSWERS, provider_extra=lambda kind: (
        'protocol = "anthropic"' if kind == "anthropic" else ""))


class Bed:
    def __init__(self, server: ServeProcess, hostile: HostileUpstream, probe: Probe):
        self.server, self.hostile, self.probe = server, hostile, probe
        self.http = httpx.Client(base_url=server.url, timeout=60)
        probe.measure(30)  # warm: connections, caches, the first decisions written
        self.idle_mb = rss_mb(server.pid)

    def attack(self, kind: str, *, stream: bool) -> tuple[httpx.Response, list[str]]:
        """One request to ``kind``'s route while the probe runs (flat, or the attack
        is played once more): the answer and, for a stream, its lines. Fails if the
        hostile provider was not called."""
        return self.probe.flat_during(lambda: self._attack_once(kind, stream))

    def _attack_once(self, kind: str, stream: bool) -> tuple[httpx.Response, list[str]]:
        before = self.hostile.hits[kind]
        body: dict[str, Any] = {"model": kind, "messages": [{"role": "user", "content": "x"}]}
        if stream:
            body["stream"] = True
        out: dict[str, Any] = {}

        def send() -> None:
            with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
                out["lines"] = [ln for ln in r.iter_lines() if ln]
                out["response"] = r

        started = time.monotonic()
        t = threading.Thread(target=send)
        t.start()
        t.join(60)
        # the moments after the attack too, and enough samples for a p99
        time.sleep(max(0.3, PROBE_SECS - (time.monotonic() - started)))
        assert "response" in out, "the attack request did not finish"
        assert self.hostile.hits[kind] == before + 1
        return out["response"], out["lines"]

    def decision(self, request_id: str) -> dict[str, Any]:
        return wait_decision(self.http, request_id)

    def assert_bounded(self) -> None:
        peak = peak_rss_mb(self.server.pid)
        assert peak <= self.idle_mb + RSS_BUDGET_MB, \
            f"peak RSS {peak:.0f} MB, idle {self.idle_mb:.0f} MB"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    tmp = tmp_path_factory.mktemp("hostile-answers")
    gzip_bomb(GiB)  # built once, before anything is timed
    gzip_bomb(len(EVENTS) * 1024, EVENTS)
    with HostileUpstream(ANSWERS) as hostile, FakeUpstream() as good, \
            ServeProcess(config(tmp, hostile, good.url + "/v1"), tmp / "serve.log",
                         log_level="WARNING") as server, \
            Probe(server.url, "ok") as probe:
        bed = Bed(server, hostile, probe)
        try:
            yield bed
        finally:
            bed.http.close()


def failed_over(bed: Bed, resp: httpx.Response, cls: str, says: str) -> dict[str, Any]:
    assert resp.status_code == 200, resp.read()
    assert resp.headers["x-humpyard-target"] == "good"
    dec = bed.decision(resp.headers["x-humpyard-request-id"])
    tried = [(a["target"], a["failure_class"]) for a in dec["attempts"]
             if not a.get("skipped")]
    assert tried == [(dec["attempts"][0]["target"], cls), ("good", None)]
    assert says in dec["attempts"][0]["error"]
    return dec


@pytest.mark.parametrize(("kind", "says"), [
    ("bomb200", "max_decompression_ratio"),
    ("plain", "max_response_bytes"),
], ids=["gzip-bomb-200", "plain-1GiB-body"])
def test_a_huge_buffered_answer_fails_over_within_bounds(bed: Bed, kind: str,
                                                         says: str) -> None:
    resp, _ = bed.attack(kind, stream=False)
    failed_over(bed, resp, "connection", says)
    bed.assert_bounded()


def test_a_gzip_bomb_on_an_error_answer_is_read_no_further_than_the_error_read(
        bed: Bed) -> None:
    resp, _ = bed.attack("bomb500", stream=False)
    dec = failed_over(bed, resp, "server_error", "")
    assert len(dec["attempts"][0]["error"]) <= 500  # the body's start, as for any error
    bed.assert_bounded()


@pytest.mark.parametrize(("kind", "says"), [
    ("bombstream", "max_decompression_ratio"),
    ("endless", "max_sse_event_bytes"),
    ("anthropic", "max_sse_event_bytes"),
], ids=["gzip-bomb-stream", "endless-line", "endless-line-anthropic"])
def test_a_hostile_stream_fails_over_before_the_first_content(bed: Bed, kind: str,
                                                              says: str) -> None:
    resp, lines = bed.attack(kind, stream=True)
    failed_over(bed, resp, "connection", says)
    assert lines[-1] == "data: [DONE]" and not any("error" in ln for ln in lines)
    bed.assert_bounded()


def test_an_endless_line_after_the_first_content_ends_the_stream_cleanly(bed: Bed) -> None:
    resp, lines = bed.attack("endlessafter", stream=True)
    assert resp.status_code == 200 and resp.headers["x-humpyard-target"] == "endlessafter"
    assert any("partial" in ln for ln in lines)
    last = json.loads(lines[-1].removeprefix("data: "))
    assert last["error"]["code"] == "stream_broken"
    dec = bed.decision(resp.headers["x-humpyard-request-id"])
    assert dec["outcome"] == "stream_broken"
    assert "max_sse_event_bytes" in dec["error"]
    bed.assert_bounded()
