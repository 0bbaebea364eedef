"""How many refused requests a process writes to the ledger: a per-minute allowance.

A request refused before routing (a wrong key, a malformed body, an unknown
path) is junk traffic as often as not, and on DynamoDB every write is billed
to the operator; ``RateSampler`` lets through at most ``per_minute`` of them
per process and holds back the rest; the metric ``humpyard_refused_total``
counts every one, written or not.

``refused_per_minute`` defaults to ``DEFAULT_PER_MINUTE`` (6) locally and on
Lambda alike, so a flood of wrong keys or unknown paths costs a handful of
ledger rows a minute, not gigabytes a day. An explicit 0 turns sampling off:
every refusal is written (docs/configuration.md).
"""

from __future__ import annotations

import threading

DEFAULT_PER_MINUTE = 6
"""Refusals written a minute per process when the file says nothing
(``config.models.RawConfig.refused_per_minute`` repeats it)."""


class RateSampler:
    """A token bucket of ``per_minute`` tokens refilled continuously; 0 = no limit.

    It starts full: a burst of ``per_minute`` is written at once, then one every
    ``60 / per_minute`` seconds."""

    def __init__(self, per_minute: float) -> None:
        self.per_minute = per_minute
        self._tokens = float(per_minute)
        self._at: float | None = None
        self._lock = threading.Lock()

    def allow(self, now: float) -> bool:
        """Whether one more may be written at monotonic time ``now``."""
        if self.per_minute <= 0:
            return True
        with self._lock:
            if self._at is not None:
                self._tokens = min(self.per_minute,
                                   self._tokens + (now - self._at) * self.per_minute / 60)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False
