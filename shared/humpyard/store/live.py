"""``LiveState``: the ``LiveStateStore`` contract in process memory.

Locally, endpoint health and latency figures live in memory (a restart
starts everything healthy), so the memory and SQLite stores both delegate to
one of these. The DynamoDB backend implements the same contract with
conditional writes.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from humpyard.errors import StoreError


class LiveState:
    """Breaker states and latency buckets for one process; every call is atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._breakers: dict[str, dict[str, Any]] = {}
        self._latency: dict[str, dict[int, list[float]]] = {}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise StoreError("store is closed")
            yield

    def close(self) -> None:
        """Refuse further calls; idempotent."""
        with self._lock:
            self._closed = True

    def get_breakers(self) -> dict[str, dict[str, Any]]:
        with self._locked():
            return copy.deepcopy(self._breakers)

    def get_breaker(self, key: str) -> dict[str, Any] | None:
        with self._locked():
            return copy.deepcopy(self._breakers.get(key))

    def put_breaker(
        self, key: str, state: dict[str, Any], expected_version: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        new_version = check_breaker_version(state, expected_version)
        with self._locked():
            current = self._breakers.get(key)
            stored_version = None if current is None else current.get("version")
            if stored_version != expected_version:
                return False, copy.deepcopy(current)
            stored = copy.deepcopy(state)
            stored["version"] = new_version
            self._breakers[key] = stored
            return True, copy.deepcopy(stored)

    def add_latency(self, samples: dict[str, tuple[int, float]], bucket: int) -> None:
        checked = {t: (int(c), float(ms)) for t, (c, ms) in samples.items()}
        with self._locked():
            for target, (count, total_ms) in checked.items():
                cell = self._latency.setdefault(target, {}).setdefault(int(bucket), [0, 0.0])
                cell[0] += count
                cell[1] += total_ms

    def get_latency(self, since_bucket: int) -> dict[str, list[tuple[int, int, float]]]:
        with self._locked():
            out: dict[str, list[tuple[int, int, float]]] = {}
            for target, buckets in self._latency.items():
                rows = [(b, int(c), float(ms)) for b, (c, ms) in sorted(buckets.items())
                        if b >= since_bucket]
                if rows:
                    out[target] = rows
            return out

    def purge_latency(self, before_bucket: int) -> int:
        with self._locked():
            dropped = 0
            for target in list(self._latency):
                buckets = self._latency[target]
                for b in [b for b in buckets if b < before_bucket]:
                    del buckets[b]
                    dropped += 1
                if not buckets:
                    del self._latency[target]
            return dropped


class LiveStateDelegate:
    """Mixin for stores that keep live state in process: forwards to ``self._live``."""

    _live: LiveState

    def get_breakers(self) -> dict[str, dict[str, Any]]:
        return self._live.get_breakers()

    def get_breaker(self, key: str) -> dict[str, Any] | None:
        return self._live.get_breaker(key)

    def put_breaker(
        self, key: str, state: dict[str, Any], expected_version: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        return self._live.put_breaker(key, state, expected_version)

    def add_latency(self, samples: dict[str, tuple[int, float]], bucket: int) -> None:
        self._live.add_latency(samples, bucket)

    def get_latency(self, since_bucket: int) -> dict[str, list[tuple[int, int, float]]]:
        return self._live.get_latency(since_bucket)

    def purge_latency(self, before_bucket: int) -> int:
        return self._live.purge_latency(before_bucket)


def check_breaker_version(state: dict[str, Any], expected_version: int | None) -> int:
    """The version ``state`` would be stored at, or ``ValueError`` if it could repeat one."""
    version = state.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError("a breaker state needs an int version")
    if expected_version is not None and version <= expected_version:
        raise ValueError(
            f"breaker version {version} must be greater than the expected {expected_version}")
    return version
