"""Pure shaping of quota snapshots: what is stored, and what ``GET /v1/quota`` shows.

A stored snapshot (JSON-ready, one per provider)::

    {"provider": "opencode", "source": "opencode-go", "base_url": "https://…/v1",
     "windows": {"rolling": {"percent": 12.5, "status": "ok", "resets_at": 1800003600.0}},
     "fetched_at": 1800000000.0,   # last successful read, None if never
     "polled_at": 1800000060.0,    # last attempt, None if never
     "error": "the provider answered HTTP 500"}   # the last attempt's failure, or None

A snapshot only counts for a provider whose current ``base_url`` and
``quota_source`` are the ones it records; otherwise the provider reads as
never polled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from humpyard.config.spec import ProviderSpec
from humpyard.quota.base import QuotaReading

REDACTED = "[redacted]"


def iso(ts: Any) -> str | None:
    """Epoch seconds → ``2027-01-15T08:00:00Z``; None (or anything not a finite
    number) → None."""
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` with every occurrence of a secret in any string (keys included) redacted."""
    found = [s for s in secrets if s]
    if not found:
        return value
    return _scrub(value, found)


def _scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for s in secrets:
            if s in value:
                value = value.replace(s, REDACTED)
        return value
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, secrets) for v in value]
    return value


def matches(snapshot: dict[str, Any] | None, provider: ProviderSpec) -> bool:
    """Whether ``snapshot`` was taken from this provider's current URL and source."""
    return (isinstance(snapshot, dict) and snapshot.get("source") == provider.quota_source
            and snapshot.get("base_url") == provider.base_url)


def empty_snapshot(provider: ProviderSpec) -> dict[str, Any]:
    """A never-polled snapshot for the provider's current URL and source."""
    return {"provider": provider.name, "source": provider.quota_source,
            "base_url": provider.base_url, "windows": {}, "fetched_at": None,
            "polled_at": None, "error": None}


def next_snapshot(provider: ProviderSpec, previous: dict[str, Any] | None,
                  reading: QuotaReading, now: float) -> dict[str, Any]:
    """The snapshot after a poll: a good reading replaces the windows; a failed one
    keeps the previous windows (which then age towards stale) and records why."""
    snap = (dict(previous) if previous is not None and matches(previous, provider)
            else empty_snapshot(provider))
    snap["polled_at"] = now
    if reading.ok:
        snap["windows"] = {name: {"percent": w.percent, "status": w.status,
                                  "resets_at": w.resets_at}
                           for name, w in reading.windows.items()}
        snap["fetched_at"] = now
        snap["error"] = None
    else:
        snap["error"] = reading.error
    return snap


def provider_view(provider: ProviderSpec, snapshot: dict[str, Any] | None, now: float,
                  stale_secs: float, missing_reason: str = "never polled") -> dict[str, Any]:
    """One provider's entry of ``GET /v1/quota``.

    ``state`` is ``fresh`` when the last successful read is at most
    ``stale_secs`` old, ``stale`` when older (its windows are still shown, with
    their age), and ``unknown`` when there was never a successful read for the
    current URL and source. ``reason`` says why it is not fresh, or that the
    last poll failed while the data is still fresh; None otherwise.
    """
    out: dict[str, Any] = {"provider": provider.name, "source": provider.quota_source,
                           "windows": {}, "state": "unknown", "reason": missing_reason}
    if snapshot is None or not matches(snapshot, provider):
        return out
    error = snapshot.get("error")
    fetched = snapshot.get("fetched_at")
    if not isinstance(fetched, int | float):
        out["reason"] = f"no successful read yet: {error}" if error else "never polled"
        return out
    age = max(0.0, now - fetched)
    windows = snapshot.get("windows") or {}
    out["windows"] = {
        name: {"percent": w.get("percent"), "status": w.get("status"),
               "resets_at": iso(w.get("resets_at")), "age_secs": round(age, 1)}
        for name, w in windows.items() if isinstance(w, dict)}
    if age > stale_secs:
        out["state"] = "stale"
        out["reason"] = (f"the data is {age:.0f}s old, older than quota_stale_secs "
                         f"({stale_secs:g}s)" + (f"; last poll: {error}" if error else ""))
    else:
        out["state"] = "fresh"
        out["reason"] = f"last poll failed: {error}" if error else None
    return out
