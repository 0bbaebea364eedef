"""The drill harness: a gateway with one misbehaving upstream, one fallback, one bystander.

``drill_config`` wires three upstreams into three routes::

    r     → first (provider a, the misbehaving one) → second (provider b)
    solo  → first only
    ok    → other (provider h), a route the fault must never touch

Provider ``a`` has a short ``timeout_secs`` so every stall ends quickly;
``failure_threshold = 1`` makes one counted failure cool an endpoint, so a
drill can say exactly what health must show afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from humpyard.clock import Clock
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway

MSG = [{"role": "user", "content": "hello"}]
A_TIMEOUT = 0.5


def drill_config(a: str, b: str, h: str, *, a_extra: str = "", b_extra: str = "",
                 route_extra: str = "", extra: str = "", threshold: int = 1,
                 a_timeout: float = A_TIMEOUT, cooldown: float = 30, top: str = "") -> str:
    return f"""{top}
[providers.a]
base_url = "{a}"
timeout_secs = {a_timeout}
connect_timeout_secs = {a_timeout}
{a_extra}
[providers.b]
base_url = "{b}"
timeout_secs = 5
{b_extra}
[providers.h]
base_url = "{h}"
timeout_secs = 5

[targets.first]
endpoints = [{{ provider = "a", model = "ma" }}]
[targets.second]
endpoints = [{{ provider = "b", model = "mb" }}]
[targets.other]
endpoints = [{{ provider = "h", model = "mh" }}]

[routes.r]
targets = ["first", "second"]
{route_extra}
[routes.solo]
targets = ["first"]
[routes.ok]
targets = ["other"]

[health]
failure_threshold = {threshold}
cooldown_secs = {cooldown}
{extra}
"""


@dataclass
class Sent:
    """One client exchange: the response (body read), SSE lines if streamed, elapsed."""

    response: httpx.Response
    elapsed: float
    lines: list[str]

    @property
    def status(self) -> int:
        return self.response.status_code

    @property
    def request_id(self) -> str:
        return self.response.headers["x-humpyard-request-id"]

    def error_message(self) -> str:
        body = self.response.json()
        err = body.get("error")
        return str(err.get("message")) if isinstance(err, dict) else ""


class Drill:
    """A running gateway plus the means to poke it and read what it recorded."""

    def __init__(self, running: Running):
        self.running = running
        self.gw = running.gw
        self.http = httpx.Client(base_url=running.url, timeout=30)

    def close(self) -> None:
        self.http.close()

    def chat(self, route: str = "r", *, stream: bool = False, **extra: Any) -> Sent:
        """POST /v1/chat/completions and read the whole answer (stream lines too)."""
        body = {"model": route, "messages": MSG, **extra}
        if stream:
            body["stream"] = True
        started = time.monotonic()
        lines: list[str] = []
        with self.http.stream("POST", "/v1/chat/completions", json=body) as resp:
            if stream and resp.status_code == 200:
                lines = [line for line in resp.iter_lines() if line]
            else:
                resp.read()
        return Sent(resp, time.monotonic() - started, lines)

    def decision(self, request_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """The decision recorded for ``request_id``, once it is: a request is recorded
        after its answer went out, a stream's after its last event."""
        deadline = time.monotonic() + timeout
        while (r := self.http.get(f"/v1/decisions/{request_id}")).status_code == 404 \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def health(self, key: str) -> Any:
        """The live breaker view of ``provider/model``."""
        return self.gw.health.view(key, self.gw.clock.now())

    def assert_serving(self) -> None:
        """The bystander route still answers, and quickly."""
        sent = self.chat("ok")
        assert sent.status == 200, sent.response.text
        assert sent.response.headers["x-humpyard-target"] == "other"
        assert sent.elapsed < 2.0
        streamed = self.chat("ok", stream=True)
        assert streamed.status == 200 and streamed.lines[-1] == "data: [DONE]"
        assert self.health("h/mh").state == "healthy"


@contextmanager
def drill(a: FakeUpstream | str, b: FakeUpstream, h: FakeUpstream, *,
          clock: Clock | None = None, **config: Any) -> Iterator[Drill]:
    """Serve ``drill_config`` in front of the three upstreams (``a`` may be a URL),
    on ``clock`` (default: the system's)."""
    a_url = a if isinstance(a, str) else a.url
    with running_gateway(drill_config(a_url, b.url, h.url, **config),
                         clock=clock) as running:
        d = Drill(running)
        try:
            yield d
        finally:
            d.close()


def attempts(decision: dict[str, Any]) -> list[tuple[str, str | None]]:
    """``(target, failure_class)`` of every attempt that called an upstream."""
    return [(a["target"], a["failure_class"]) for a in decision["attempts"]
            if not a.get("skipped")]
