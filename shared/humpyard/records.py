"""What one client request is and what happened to it.

``Call`` is the request in flight (what it asked, the plan decided for it, the
attempts made); the executor reports one ``Attempt`` per endpoint it touched
and, when a target answered, a ``Served``. The decision record
(``ledger/decision.py``) is built from these three.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from humpyard.clock import key_time, time_key
from humpyard.config.spec import Config, EndpointSpec, KeySpec
from humpyard.planning.types import Plan, RequestFacts

_ID_PREFIX = os.urandom(4).hex()  # per process: ids from two instances never collide
_ID_COUNTER = itertools.count(1)
_ID_SHAPE = re.compile("req_[0-9a-f]{32}")
ID_CLOCK_AGREEMENT_SECS = 5.0
"""How close a request id's time must be to the clock for the decision to take it as its ``ts``."""


def new_request_id(now: float | None = None) -> str:
    """A unique request id: ``req_``, the time it was issued (``clock.time_key``: 16 hex
    digits, exact and sortable), a random per-process prefix and a counter.

    The time is ``now`` (the caller's clock), else the system's. It lets the DynamoDB
    ledger find a decision by its id alone (ADR 0019). Not a secret, so no per-request
    entropy is drawn (``uuid4`` reads the OS's random source on every call, which
    costs a system call here)."""
    stamp = time_key(time.time() if now is None else now)
    return f"req_{stamp}{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFF_FFFF:08x}"


def request_time(request_id: str) -> float | None:
    """The time a ``new_request_id`` id was issued; None for any other string."""
    if _ID_SHAPE.fullmatch(request_id) is None:
        return None
    found = key_time(request_id[4:20])
    return found if math.isfinite(found) else None


def issued_at(request_id: str, now: float) -> float:
    """A request's ``ts``: the time its id carries when that agrees with ``now`` (the id
    was issued by this clock a moment ago: the Lambda wiring issues it before the
    request reaches the app), else ``now``."""
    found = request_time(request_id)
    if found is not None and abs(found - now) <= ID_CLOCK_AGREEMENT_SECS:
        return found
    return now


@dataclass(slots=True)
class Attempt:
    """One endpoint tried (or skipped without a call: ``skipped`` says why)."""

    target: str
    provider: str
    model: str
    class_: str | None = None
    status: int | None = None
    failure_class: str | None = None
    latency_ms: float | None = None
    retry_after_ms: int | None = None  # the cooldown honoured (clamped)
    stated_retry_after_ms: int | None = None  # what the upstream said
    error: str | None = None
    skipped: str | None = None  # skipped_unavailable | cold | probe_in_flight
    resend: bool = False
    cancelled: bool = False  # the client left while it was in flight (says nothing of health)
    purpose: str | None = None  # judge | efficient on Switchyard routes' inner calls
    notes: list[str] | None = None  # how the body was fitted to this endpoint, if at all
    started: float | None = None  # the clock's monotonic time the call began (traces)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"target": self.target, "provider": self.provider,
                             "model": self.model,
             "class": self.class_, "status": self.status,
             "failure_class": self.failure_class,
             "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 2)}
        if self.retry_after_ms is not None:
            d["retry_after_ms"] = self.retry_after_ms
        if self.stated_retry_after_ms is not None:
            d["stated_retry_after_ms"] = self.stated_retry_after_ms
        if self.error:
            d["error"] = self.error
        if self.skipped:
            d["skipped"] = self.skipped
        if self.resend:
            d["resend"] = True
        if self.cancelled:
            d["cancelled"] = True
        if self.purpose:
            d["purpose"] = self.purpose
        if self.notes:
            d["notes"] = list(self.notes)
        return d


@dataclass(slots=True)
class Served:
    """A target answered. Exactly one of ``body`` (buffered) or ``events`` (stream).

    Both are the gateway's own shape (an OpenAI chat completion, chat chunk
    events) unless ``native`` names the upstream protocol they were relayed
    in untranslated (``"anthropic"``: the client spoke it too, so its body
    went through as it came and the answer comes back the same way).
    ``usage`` is OpenAI-shaped either way, with the cache counts under
    ``cache_read_input_tokens``/``cache_creation_input_tokens`` when known.
    """

    target: str
    endpoint: EndpointSpec
    status: int
    attempts: list[Attempt]
    body: dict[str, Any] | None = None
    body_bytes: bytes | None = None  # the upstream's buffered body, passed through as-is
    events: AsyncIterator[Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    upstream_ms: float = 0.0
    closer: Callable[[], Awaitable[None]] | None = None
    native: str | None = None

    async def aclose(self) -> None:
        """Release the upstream connection of a stream (idempotent)."""
        closer, self.closer = self.closer, None
        if closer is not None:
            await closer()


@dataclass(frozen=True, slots=True)
class Native:
    """A client's own request, for an upstream that speaks the client's protocol:
    ``body`` as the client sent it (never changed here) and the client's
    ``headers`` (lower-case names), of which the upstream protocol forwards
    the few it names (``executor/upstreams.py``)."""

    protocol: str
    body: dict[str, Any]
    headers: Mapping[str, str]


@dataclass
class Call:
    """A request in flight: what it asked, what was decided, what happened."""

    request_id: str
    config: Config
    key: KeySpec | None
    headers: Mapping[str, str]
    body: dict[str, Any]
    protocol: str = "openai"
    # The client's body as it came (the same object, not a copy), for an upstream
    # that speaks the client's protocol: docs/clients.md, "Anthropic upstreams".
    original: Any = None
    native: str | None = None  # the answer is relayed in this upstream protocol
    ts: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    answered: float | None = None  # perf_counter when a buffered answer was ready
    facts: RequestFacts | None = None
    plan: Plan | None = None
    attempts: list[Attempt] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Gives back what admission took (budget reservation, per-key limits: allowance.py),
    # called once with the decision when the record closes (recording.py).
    settle: Callable[[Mapping[str, Any] | None], None] | None = None
    limit_headers: dict[str, str] = field(default_factory=dict)  # a limited key's headers
    # The client protocol's stream encoder, when it keeps state (the Responses event
    # numbering): a stream the server stops is ended by the same encoder, numbered on
    # (``http/intake.py``, ``_answer_stopped``).
    encoder: Any = None
