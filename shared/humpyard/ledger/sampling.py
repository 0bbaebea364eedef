"""How many refused requests a process writes to the ledger: a per-minute allowance.

A request refused before routing (a wrong key, a malformed body, an unknown
path) is junk traffic as often as not, and on DynamoDB every write is billed
to the operator; ``RateSampler`` lets through at most ``per_minute`` of them
per process (0: every one) and says how many it held back, which the metric
``humpyard_refused_total`` counts whether written or not.
"""

from __future__ import annotations

import threading


class RateSampler:
    """A token bucket of ``per_minute`` tokens refilled continuously; 0 = no limit."""

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
