"""Per-key limits shared through the store, as one ``Leases`` counts them: a
transaction per request where that is cheap (``CountedLimits``, SQLite), blocks
of each minute where it is not (``limit_blocks.LimitBlocks``, DynamoDB).

Both answer the same calls: ``take_now`` (from what is held, no store call; or
None), ``take`` and ``counts`` (blocking: a worker thread's), ``release``,
``tick`` (a long-lived process's upkeep, which sets ``ticking``) and ``close``;
``LimitCounter`` holds what both are given. ``limit_blocks.limit_counter`` picks the
one a store shares; the memory store (one process) has none and its limits are
the process's own (``allowance.Allowance.admit``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from humpyard.clock import Clock
from humpyard.store.sharing import LimitCount

log = logging.getLogger("humpyard.leases")

SHARED_LIMITS = frozenset({"sqlite", "dynamodb"})
"""Store kinds whose per-key limits are shared: counted per request (SQLite), in blocks
(DynamoDB)."""


class LimitCounter:
    """What a limit counter is given: the store, the clock, this instance's name, how
    long a slot lease lasts, and ``later``, which runs a blocking call soon, in order,
    off the loop. ``ticking``: a long-lived process's upkeep calls ``tick``."""

    def __init__(self, store: Any, clock: Clock, instance: str, *, lease_secs: float,
                 later: Callable[..., None]) -> None:
        self.store = store
        self.clock = clock
        self.instance = instance
        self.lease_secs = lease_secs
        self._later = later
        self.ticking = False
        self._lock = threading.Lock()


class CountedLimits(LimitCounter):
    """Every admission and every end is one store transaction (``take_limits``,
    ``release_limits``): exact across the processes on one file. In-flight slots
    are rows per instance with an expiry that ``tick`` renews while requests of this
    instance hold some, so a killed process frees them within ``lease_secs``."""

    def __init__(self, store: Any, clock: Clock, instance: str, *, lease_secs: float,
                 later: Callable[..., None]) -> None:
        super().__init__(store, clock, instance, lease_secs=lease_secs, later=later)
        self._in_flight = 0  # requests of this instance holding a slot

    def take_now(self, key_id: str, *, window: float, rpm: int | None, tpm: int | None,
                 parallel: int | None, tokens: int) -> LimitCount | None:
        return None  # every request is counted in the store

    def take(self, key_id: str, *, window: float, rpm: int | None, tpm: int | None,
             parallel: int | None, tokens: int, now: float) -> LimitCount:
        counted: LimitCount = self.store.take_limits(
            key_id, self.instance, window=window, rpm=rpm, tpm=tpm, parallel=parallel,
            tokens=tokens, now=now, expires_at=now + self.lease_secs)
        if counted.refused is None and parallel is not None:
            with self._lock:
                self._in_flight += 1
        return counted

    def release(self, key_id: str, *, window: float, tokens: int, parallel: bool) -> None:
        if parallel:
            with self._lock:
                self._in_flight = max(0, self._in_flight - 1)
        now = self.clock.now()
        self._later(self.store.release_limits, key_id, self.instance, window=window,
                    tokens=tokens, parallel=parallel, now=now,
                    expires_at=now + self.lease_secs)

    def counts(self, key_id: str, *, window: float, now: float) -> LimitCount:
        counted: LimitCount = self.store.limit_counts(key_id, window=window, now=now)
        return counted

    def tick(self) -> None:
        with self._lock:
            holding = self._in_flight > 0
        if not holding:
            return
        try:
            self.store.renew_slots(self.instance, self.clock.now() + self.lease_secs)
        except Exception:  # noqa: BLE001 - upkeep must never stop the gateway
            log.exception("in-flight slots could not be renewed")

    def close(self) -> None:
        """Nothing to give back: each request's end gave its slot back."""

