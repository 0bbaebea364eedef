"""``DynamoDBWriter``: the Lambda instance's ledger writer — bounded, batched, metered.

One daemon thread takes everything queued (up to ``max_batch`` writes) and
writes it with one ``store.write_batch``: the decisions and the spend summed
per key and period (so a burst of spend for one key is one ``ADD``). A Lambda
instance serves one request at a time and ``Instance.flush`` waits for the
writer before the response's last byte, so there a batch is what one
request recorded; the same writer keeps up with any rate elsewhere because
its batches grow with the queue.

Bounded: at most ``max_pending`` writes wait. Beyond that a write is not
queued; it is logged as unsaved (with its whole payload as JSON, on
``humpyard.store`` at ERROR) and counted in
``humpyard_ledger_lost_total{kind,reason="overload"}``. A write the store
still fails after its own retries is logged and counted the same way with
``reason="error"`` — only what the store says it did not write
(``LedgerWriteError.unwritten``). Nothing is dropped silently.

Metrics (``metrics``, a ``GatewayMetrics``, set once the gateway exists):
``humpyard_ledger_queue_depth`` and ``humpyard_ledger_lag_seconds`` (age of
the oldest waiting write) after every batch and ``flush``;
``humpyard_ledger_batch_size`` and ``humpyard_ledger_write_seconds`` per
batch. The interface is the batched writer's (``submit_decision``,
``submit_spend``, ``flush``, ``close``, ``pending``), plus ``submit`` for
callers that still name the store call (``append_decision``, ``add_spend``;
anything else is run in order on the same thread).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from humpyard.clock import Clock, SystemClock
from humpyard.errors import StoreError
from humpyard.store.base import Decision, LedgerBatch
from humpyard.store.writer import log_unsaved, perform

logger = logging.getLogger("humpyard.store")

DEFAULT_MAX_PENDING = 10_000
DEFAULT_MAX_BATCH = 500

_Write = tuple[str, Any, float]  # (kind, payload, submitted at: monotonic)


class DynamoDBWriter:
    """Queue ledger writes and write them in batches on one thread; see the module docstring.

    After ``close`` a submitted write is written at once in the caller's
    thread, so shutdown stragglers still land. The writer does not own the
    store: close the writer first, then the store.
    """

    def __init__(self, store: Any, *, clock: Clock | None = None,
                 max_pending: int = DEFAULT_MAX_PENDING, max_batch: int = DEFAULT_MAX_BATCH,
                 metrics: Any = None, name: str = "humpyard-ledger-writer") -> None:
        if max_pending < 1 or max_batch < 1:
            raise ValueError("max_pending and max_batch must be at least 1")
        self.metrics = metrics
        self._store = store
        self._clock = clock or SystemClock()
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._queue: deque[_Write] = deque()
        self._cond = threading.Condition()
        self._pending = 0  # queued plus the batch being written
        self._writing_since: float | None = None  # oldest write of the batch in flight
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Writes queued or being written."""
        with self._cond:
            return self._pending

    # -- submitting -------------------------------------------------------------------

    def submit_decision(self, decision: Decision) -> bool:
        """Queue one decision; False when it was not queued (written inline after
        ``close``, or lost to overload: logged and counted)."""
        return self._submit(("decision", decision, 0.0))

    def submit_spend(self, key_id: str, period: str, usd: float) -> bool:
        """Queue ``usd`` of spend for the key's period (summed with the rest of the batch)."""
        return self._submit(("spend", (key_id, period, usd), 0.0))

    def submit(self, fn_name: str, *args: Any, **kw: Any) -> bool:
        """``store.<fn_name>(*args, **kw)`` by name: decisions and spend join the batches."""
        if fn_name == "append_decision" and len(args) == 1 and not kw:
            return self.submit_decision(args[0])
        if fn_name == "add_spend" and len(args) == 3 and not kw:
            return self.submit_spend(*args)
        return self._submit(("call", (fn_name, args, kw), 0.0))

    def _submit(self, write: _Write) -> bool:
        kind, payload, _ = write
        with self._cond:
            if not self._closed:
                if self._pending >= self._max_pending:
                    self._lose([(kind, payload)], "overload",
                               f"{self._pending} ledger writes already pending")
                    return False
                self._pending += 1
                self._queue.append((kind, payload, self._clock.monotonic()))
                self._cond.notify_all()
                return True
        self._write([write])
        return False

    # -- waiting ----------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write submitted so far is written (or lost); False if
        ``timeout`` passed first."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._pending == 0, timeout)
        self._gauges()
        return done

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued, then stop the thread; True when it stopped in time."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self._gauges()
        return not self._thread.is_alive()

    # -- the thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if not self._queue:
                    return
                taken = [self._queue.popleft()
                         for _ in range(min(self._max_batch, len(self._queue)))]
                self._writing_since = taken[0][2]
            try:
                self._write(taken)
            finally:
                with self._cond:
                    self._pending -= len(taken)
                    self._writing_since = None
                    self._cond.notify_all()
                self._gauges()

    def _write(self, taken: list[_Write]) -> None:
        """Write one batch; never raises."""
        batch = LedgerBatch()
        calls = []
        for kind, payload, _ in taken:
            if kind == "decision":
                batch.decisions.append(payload)
            elif kind == "spend":
                key_id, period, usd = payload
                batch.spend[(key_id, period)] = batch.spend.get((key_id, period), 0.0) + usd
            else:
                calls.append(payload)
        if len(batch):
            started = self._clock.monotonic()
            self._write_batch(batch)
            if self.metrics is not None:
                self.metrics.ledger_batch_size.observe(len(taken) - len(calls))
                self.metrics.ledger_write_seconds.observe(self._clock.monotonic() - started)
        for call in calls:
            perform(self._store, call)

    def _write_batch(self, batch: LedgerBatch) -> None:
        try:
            self._store.write_batch(batch)
        except ValueError:
            if len(batch) == 1:
                self._lose(_writes(batch), "error", "not a valid decision")
                return
            for one in _singles(batch):  # find the bad decision, keep the rest
                self._write_batch(one)
        except StoreError as exc:
            unwritten = getattr(exc, "unwritten", batch)
            self._lose(_writes(unwritten), "error", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the writer thread must survive anything
            self._lose(_writes(batch), "error", f"{type(exc).__name__}: {exc}")

    def _lose(self, writes: list[tuple[str, Any]], reason: str, why: str) -> None:
        for kind, payload in writes:
            try:
                if kind == "decision":
                    log_unsaved("append_decision", (payload,), {}, why)
                elif kind == "spend":
                    log_unsaved("add_spend", tuple(payload), {}, why)
                else:
                    fn_name, args, kw = payload
                    log_unsaved(fn_name, args, kw, why)
                    continue
                if self.metrics is not None:
                    self.metrics.ledger_lost.inc(kind=kind, reason=reason)
            except Exception:  # noqa: BLE001 - logging must never kill the writer
                pass

    def _gauges(self) -> None:
        if self.metrics is None:
            return
        with self._cond:
            depth = self._pending
            oldest = self._queue[0][2] if self._queue else None
            if self._writing_since is not None:
                oldest = self._writing_since
        lag = 0.0 if oldest is None else max(0.0, self._clock.monotonic() - oldest)
        self.metrics.ledger_queue_depth.set(depth)
        self.metrics.ledger_lag_seconds.set(lag)


def _writes(batch: LedgerBatch) -> list[tuple[str, Any]]:
    return ([("decision", d) for d in batch.decisions]
            + [("spend", (k, p, usd)) for (k, p), usd in batch.spend.items()])


def _singles(batch: LedgerBatch) -> list[LedgerBatch]:
    return ([LedgerBatch([d]) for d in batch.decisions]
            + [LedgerBatch([], {kp: usd}) for kp, usd in batch.spend.items()])
