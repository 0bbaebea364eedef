"""``SharedLatency``: latency figures every instance shares, through time buckets in the store.

``record`` only adds to this instance's pending totals (count and total
milliseconds per target and bucket). When ``flush_secs`` have passed since
the last flush they are written with one ``add_latency`` per bucket (an
atomic ``ADD``): by the ``record`` call that notices, or, with
``auto_flush=False``, by ``flush_due`` (Lambda calls it while flushing a
request, before the last byte: a frozen instance runs no background
thread). So a request costs no write, and an instance writes at most once
per ``flush_secs``. Samples still pending when an instance is reaped are
lost (at most ``flush_secs`` worth); call ``flush`` on shutdown.

``figures`` folds, per target, the bucket means of the last
``max_age_secs`` in time order with the newest weighing 0.3 (as
``planning.order.fold_latency`` folds single samples), ``samples`` being the
total count and ``updated_at`` the end of the newest bucket. The shared
buckets are re-read at most every ``refresh_secs``; this instance's pending
samples are merged in, so its own answers count at once. Another
instance's samples are seen within one flush plus one refresh. On a store
that reads the shared state in one call (DynamoDB), the buckets come with
the instance's ``SharedState`` view (re-read every ``refresh_secs``), so
they cost no read of their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from humpyard.clock import Clock
from humpyard.errors import StoreError
from humpyard.planning.order import SMOOTHING
from humpyard.planning.types import LatencyFigure
from humpyard.shared_state import SharedState, state_for
from humpyard.store.base import LiveStateStore

logger = logging.getLogger("humpyard.latency")

Buckets = dict[str, dict[int, tuple[int, float]]]  # target -> bucket -> (count, total_ms)


class SharedLatency:
    """``LatencyBook`` on a shared store; safe to share between threads.

    ``state`` is the instance's ``SharedState`` (default: the store's own,
    when it has one).
    """

    def __init__(self, store: LiveStateStore, clock: Clock, *, flush_secs: float = 5.0,
                 refresh_secs: float = 1.0, bucket_secs: int = 60,
                 max_age_secs: float = 600, auto_flush: bool = True,
                 state: SharedState | None = None) -> None:
        if bucket_secs <= 0 or max_age_secs <= 0:
            raise ValueError("bucket_secs and max_age_secs must be > 0")
        self._store = store
        self._clock = clock
        self._flush_secs = flush_secs
        self._refresh_secs = refresh_secs
        self._bucket_secs = int(bucket_secs)
        self._max_age_secs = max_age_secs
        self._lock = threading.Lock()
        self._pending: Buckets = {}
        self._shared: Buckets = {}
        self._flushed_at = clock.monotonic()
        self._read_at: float | None = None
        self._figures: dict[str, LatencyFigure] | None = None  # None: data changed since
        self._figures_from = 0  # the oldest bucket the cached figures cover
        self._auto_flush = auto_flush
        self._state = state if state is not None else state_for(store, clock)
        self._generation = -1
        self._flushed: list[tuple[int, int, dict[str, tuple[int, float]]]] = []
        if self._state is not None:
            self._state.want_latency(bucket_secs=self._bucket_secs,
                                     max_age_secs=max_age_secs, refresh_secs=refresh_secs)

    def record(self, target: str, ms: float, now: float) -> LatencyFigure | None:
        """Count one answered attempt; flush when due. Returns the target's figure as now known."""
        bucket = int(now // self._bucket_secs)
        with self._lock:
            cell = self._pending.setdefault(target, {})
            count, total = cell.get(bucket, (0, 0.0))
            cell[bucket] = (count + 1, total + float(ms))
            self._figures = None
            due = self._clock.monotonic() - self._flushed_at >= self._flush_secs
        if due and self._auto_flush:
            self.flush()
        with self._lock:
            return _fold(self._merged_locked(target), self._bucket_secs, self._oldest(now))

    def flush_due(self) -> bool:
        """``flush`` when ``flush_secs`` have passed since the last one; whether it did."""
        with self._lock:
            due = bool(self._pending) and (
                self._clock.monotonic() - self._flushed_at >= self._flush_secs)
        if due:
            self.flush()
        return due

    def flush(self) -> None:
        """Write the pending samples to the store now (one ``add_latency`` per bucket).

        On a failure the samples of that bucket and of every later one stay
        pending for the next flush (not tried: the store just failed) and one
        warning is logged; a flush never raises.
        """
        with self._lock:
            pending, self._pending = self._pending, {}
            self._flushed_at = self._clock.monotonic()
        by_bucket: dict[int, dict[str, tuple[int, float]]] = {}
        for target, cells in pending.items():
            for bucket, cell in cells.items():
                by_bucket.setdefault(bucket, {})[target] = cell
        failed = False  # once the store fails, the rest of the buckets wait with it
        for bucket, samples in sorted(by_bucket.items()):
            if not failed:
                try:
                    self._store.add_latency(samples, bucket)
                except StoreError as exc:
                    logger.warning("latency flush failed; keeping the samples: %s", exc)
                    failed = True
            if failed:
                if bucket >= self._oldest(self._clock.now()):  # older ones no longer count
                    with self._lock:
                        _add(self._pending, bucket, samples)
                continue
            with self._lock:  # the snapshot now holds them, until the next read replaces it
                _add(self._shared, bucket, samples)
                self._figures = None
                if self._state is not None:  # for reads that began before this write
                    self._flushed.append((self._state.ticket(), bucket, dict(samples)))

    def figures(self, now: float) -> Mapping[str, LatencyFigure]:
        """The current figure per target (a target with no sample in ``max_age_secs`` is absent)."""
        self._refresh(now)
        oldest = self._oldest(now)
        with self._lock:
            if self._figures is None or self._figures_from != oldest:
                targets = set(self._shared) | set(self._pending)
                found = {t: _fold(self._merged_locked(t), self._bucket_secs, oldest)
                         for t in targets}
                self._figures = {t: f for t, f in found.items() if f is not None}
                self._figures_from = oldest
            return self._figures

    def _refresh(self, now: float) -> None:
        if self._state is not None:
            self._take_view(self._state)
            return
        mono = self._clock.monotonic()
        with self._lock:
            if self._read_at is not None and mono - self._read_at < self._refresh_secs:
                return
            self._read_at = mono
        try:
            rows = self._store.get_latency(self._oldest(now))
        except StoreError as exc:
            logger.warning("latency refresh failed; using the last figures: %s", exc)
            return
        shared: Buckets = {t: {b: (c, ms) for b, c, ms in cells} for t, cells in rows.items()}
        with self._lock:
            self._shared = shared
            self._figures = None

    def _take_view(self, state: SharedState) -> None:
        view = state.current()
        with self._lock:
            if view.generation == self._generation:
                return
            self._generation = view.generation
            shared: Buckets = {t: dict(cells) for t, cells in view.latency.items()}
            self._flushed = [f for f in self._flushed if f[0] > view.latency_ticket]
            for _, bucket, samples in self._flushed:  # written after that read began
                _add(shared, bucket, samples)
            self._shared = shared
            self._figures = None

    def _merged_locked(self, target: str) -> dict[int, tuple[int, float]]:
        merged = dict(self._shared.get(target, {}))
        for bucket, (count, total) in self._pending.get(target, {}).items():
            had_count, had_total = merged.get(bucket, (0, 0.0))
            merged[bucket] = (had_count + count, had_total + total)
        return merged

    def _oldest(self, now: float) -> int:
        """The oldest bucket that still counts: the one holding ``now - max_age_secs``."""
        return max(0, int((now - self._max_age_secs) // self._bucket_secs))


def _add(into: Buckets, bucket: int, samples: Mapping[str, tuple[int, float]]) -> None:
    for target, (count, total) in samples.items():
        cells = into.setdefault(target, {})
        had_count, had_total = cells.get(bucket, (0, 0.0))
        cells[bucket] = (had_count + count, had_total + total)


def _fold(buckets: Mapping[int, tuple[int, float]], bucket_secs: int,
          oldest: int) -> LatencyFigure | None:
    """Bucket means from ``oldest`` on, in time order, the newest weighing ``SMOOTHING``;
    None without samples."""
    ms: float | None = None
    samples = 0
    newest = None
    for bucket in sorted(buckets):
        count, total = buckets[bucket]
        if bucket < oldest or count <= 0:
            continue
        mean = total / count
        ms = mean if ms is None else (1 - SMOOTHING) * ms + SMOOTHING * mean
        samples += count
        newest = bucket
    if ms is None or newest is None:
        return None
    return LatencyFigure(ms=ms, samples=samples, updated_at=float((newest + 1) * bucket_secs))
