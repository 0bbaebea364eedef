"""What the executor reports: one ``Attempt`` per endpoint touched, and the result."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from humpyard.config.spec import EndpointSpec


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
    retry_after_ms: int | None = None
    error: str | None = None
    skipped: str | None = None  # skipped_unavailable | cold | probe_in_flight
    resend: bool = False
    purpose: str | None = None  # judge | efficient on Switchyard routes' inner calls

    def to_dict(self) -> dict[str, Any]:
        d = {"target": self.target, "provider": self.provider, "model": self.model,
             "class": self.class_, "status": self.status,
             "failure_class": self.failure_class,
             "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 2)}
        if self.retry_after_ms is not None:
            d["retry_after_ms"] = self.retry_after_ms
        if self.error:
            d["error"] = self.error
        if self.skipped:
            d["skipped"] = self.skipped
        if self.resend:
            d["resend"] = True
        if self.purpose:
            d["purpose"] = self.purpose
        return d


@dataclass(slots=True)
class Served:
    """A target answered. Exactly one of ``body`` (buffered) or ``events`` (stream)."""

    target: str
    endpoint: EndpointSpec
    status: int
    attempts: list[Attempt]
    body: dict[str, Any] | None = None
    raw: bytes | None = None  # the upstream's buffered body, passed through as-is
    events: AsyncIterator[Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    upstream_ms: float = 0.0
    closer: Callable[[], Awaitable[None]] | None = None

    async def aclose(self) -> None:
        """Release the upstream connection of a stream (idempotent)."""
        closer, self.closer = self.closer, None
        if closer is not None:
            await closer()
