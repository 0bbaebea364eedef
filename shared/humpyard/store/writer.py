"""Keeping the request path off the disk: ``BackgroundWriter`` for ledger writes, ``run`` for reads.

``BackgroundWriter`` owns one daemon thread. The request path hands it
decisions (``submit_decision``) and spend (``submit_spend``); neither ever
blocks nor raises. The thread takes everything queued, up to ``max_batch``
decisions, and writes it with one ``store.write_batch`` call (SQLite: one
transaction), so the more traffic there is, the bigger and cheaper each write
gets. It waits ``linger_secs`` after the first item of a batch so that
moderate traffic is also written in batches, not one transaction per request;
``flush`` and ``close`` cut that wait short.

A batch the store is too busy to take (``StoreBusy``: another process holds
the SQLite file's write lock past the busy wait) is kept and retried until
the lock is free, so a long-held lock loses nothing; only closing during
that wait gives it up (docs/decisions/0013-reads-off-the-loop.md).

The queue is bounded (docs/decisions/0006-ledger-overload.md): spend is summed
per key and period while it waits, so it takes constant room and is never
shed; decisions beyond ``max_pending`` are not queued. Nothing is lost
silently: every item that is not written (shed at the bound, or refused or
failed by the store) is logged at ERROR on ``humpyard.store`` with its
request id and whole payload as JSON (so it can be replayed) and counted in
``humpyard_ledger_lost_total{kind,reason}``.

The writer does not own the store; close the writer first, then the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from humpyard.errors import ConflictError, StoreBusy
from humpyard.store.base import Decision, LedgerBatch
from humpyard.store.rows import check_usd

if TYPE_CHECKING:
    from humpyard.metrics.gateway_metrics import GatewayMetrics

logger = logging.getLogger("humpyard.store")

T = TypeVar("T")

DEFAULT_MAX_PENDING = 10_000
"""Decisions queued at most. At ~3 KB each (a typical decision dict) that is
~30 MB; at the 2-core machine's ~1,500 requests/s, ~7 s of traffic."""
DEFAULT_MAX_BATCH = 2_000
"""Decisions per ``write_batch`` at most: a batch holds the SQLite write lock
for tens of milliseconds, not seconds."""
BUSY_RETRY_SECS = 0.05
"""Pause before retrying a batch the store was too busy to take (after its own busy
wait: SQLite waits up to 5 s for the lock before saying so)."""
DEFAULT_LINGER_SECS = 0.025
"""How long the first item of a batch waits for company before it is written."""


async def run(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run a blocking store call (typically a read) in a worker thread and await it."""
    return await asyncio.to_thread(fn, *args, **kw)


def _json(payload: Any) -> str:
    try:
        return json.dumps(payload, default=str, separators=(",", ":"))
    except (TypeError, ValueError):  # circular or otherwise unencodable
        return repr(payload)


def log_unsaved_decision(decision: Any, why: object, exc: BaseException | None = None) -> None:
    """Log a decision that was not written, with everything needed to replay it."""
    rid = decision.get("request_id") if isinstance(decision, dict) else None
    logger.error("ledger decision not written request_id=%s: %s; unsaved: %s",
                 rid, why, _json(decision), exc_info=exc)


def log_unsaved_spend(key_id: str, period: str, usd: float, why: object,
                      exc: BaseException | None = None) -> None:
    """Log a spend add that was not written, with everything needed to replay it."""
    logger.error("ledger spend not written key_id=%s period=%s: %s; unsaved: %s",
                 key_id, period, why,
                 _json({"key_id": key_id, "period": period, "usd": usd}), exc_info=exc)


def write_batch(store: Any, batch: LedgerBatch) -> None:
    """``store.write_batch(batch)``, or item by item for a store without it."""
    method = getattr(store, "write_batch", None)
    if method is not None:
        method(batch)
        return
    # A backend that has not grown write_batch yet: the old calls, one by one.
    # A decision that is already recorded is skipped, as write_batch would.
    for decision in batch.decisions:
        try:
            store.append_decision(decision)
        except ConflictError:
            pass
    for (key_id, period), usd in batch.spend.items():
        store.add_spend(key_id, period, usd)


class _Lost:
    """Counts and logs what was not written; safe before metrics are attached."""

    def __init__(self) -> None:
        self.metrics: GatewayMetrics | None = None

    def decisions(self, decisions: list[Decision], reason: str, why: object,
                  exc: BaseException | None = None) -> None:
        for d in decisions:
            try:
                log_unsaved_decision(d, why, exc)
            except Exception:  # logging must never kill the writer thread
                pass
        if self.metrics is not None and decisions:
            self.metrics.ledger_lost.inc(len(decisions), kind="decision", reason=reason)

    def spend(self, spend: dict[tuple[str, str], float], reason: str, why: object,
              exc: BaseException | None = None) -> None:
        for (key_id, period), usd in spend.items():
            try:
                log_unsaved_spend(key_id, period, usd, why, exc)
            except Exception:
                pass
        if self.metrics is not None and spend:
            self.metrics.ledger_lost.inc(len(spend), kind="spend", reason=reason)


def perform(store: Any, batch: LedgerBatch, lost: _Lost, *, busy: bool = False) -> None:
    """Write ``batch``; never raises (but see ``busy``). What cannot be written is
    logged and counted.

    With ``busy``, a ``StoreBusy`` (the store could not take its write lock in time,
    and wrote nothing) is raised for the caller to retry the whole batch.

    ``ValueError`` means the store refused an item and wrote nothing (see
    ``LedgerStore.write_batch``): the items are then written one at a time so
    that only the bad one is lost. Any other failure loses the whole batch
    (``StoreError`` after the store's own retries and lock waits), or only its
    ``unwritten`` part when the error says what that is (DynamoDB).
    """
    try:
        write_batch(store, batch)
        return
    except ValueError:
        if len(batch) == 1:
            _lose(batch, lost, *_failure())
            return
    except StoreBusy:
        if busy:
            raise
        _lose(batch, lost, *_failure())
        return
    except Exception as exc:
        unwritten = getattr(exc, "unwritten", None)
        _lose(unwritten if isinstance(unwritten, LedgerBatch) else batch, lost, *_failure())
        return
    for d in batch.decisions:
        perform(store, LedgerBatch(decisions=[d]), lost)
    for key, usd in batch.spend.items():
        perform(store, LedgerBatch(spend={key: usd}), lost)


def _failure() -> tuple[str, BaseException | None]:
    exc = sys.exc_info()[1]
    return f"{type(exc).__name__}: {exc}", exc


def _lose(batch: LedgerBatch, lost: _Lost, why: str, exc: BaseException | None) -> None:
    lost.decisions(batch.decisions, "error", why, exc)
    lost.spend(batch.spend, "error", why, exc)


class BackgroundWriter:
    """Writes decisions and spend to ``store`` in batches, on one daemon thread.

    ``max_pending`` bounds the decisions waiting: one more is not queued but
    logged as unsaved and counted lost with reason ``overload``. Spend waits
    summed per ``(key_id, period)`` and is never shed. ``clock`` (its
    ``monotonic``) times the lag and write figures. After ``close`` a submitted
    item is written at once in the caller's thread, so shutdown stragglers are
    still recorded.
    """

    def __init__(self, store: Any, *, max_pending: int = DEFAULT_MAX_PENDING,
                 max_batch: int = DEFAULT_MAX_BATCH, linger_secs: float = DEFAULT_LINGER_SECS,
                 clock: Any = None, name: str = "humpyard-store-writer") -> None:
        if max_pending < 1 or max_batch < 1:
            raise ValueError("max_pending and max_batch must be at least 1")
        self._store = store
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._linger = linger_secs
        self._monotonic: Callable[[], float] = clock.monotonic if clock else time.monotonic
        self._lost = _Lost()
        self._cond = threading.Condition()
        self._decisions: deque[tuple[float, Decision]] = deque()
        self._spend: dict[tuple[str, str], float] = {}
        self._spend_since: float | None = None
        self._writing = 0  # items in the batch being written
        self._writing_since: float | None = None
        self._hurry = 0  # flush() callers waiting: skip the linger
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- the request path --------------------------------------------------

    def submit_decision(self, decision: Decision) -> bool:
        """Queue ``decision``; True if queued, False if it was shed or written inline.

        Never raises and never blocks (after ``close`` it is written in the
        caller's thread).
        """
        with self._cond:
            closed = self._closed
            queued = len(self._decisions)
            if not closed and queued < self._max_pending:
                self._decisions.append((self._monotonic(), decision))
                if queued == 0 or queued + 1 == self._max_batch:  # wake it once per batch
                    self._cond.notify_all()
                return True
        if closed:
            perform(self._store, LedgerBatch(decisions=[decision]), self._lost)
        else:  # the overload policy: docs/decisions/0006-ledger-overload.md
            self._lost.decisions([decision], "overload",
                                 f"{self._max_pending} decisions already waiting")
        return False

    def submit_spend(self, key_id: str, period: str, usd: float) -> bool:
        """Add ``usd`` to the key's spend in ``period``, summed with what is waiting.

        True if queued, False if written inline (after ``close``). Never raises.
        """
        try:
            usd = check_usd(usd)
        except ValueError as exc:  # summed with others, it would spoil their total too
            self._lost.spend({(key_id, period): usd}, "error", exc)
            return False
        with self._cond:
            if not self._closed:
                key = (key_id, period)
                if not self._spend:
                    self._spend_since = self._monotonic()
                    if not self._decisions:
                        self._cond.notify_all()
                self._spend[key] = self._spend.get(key, 0.0) + usd
                return True
        perform(self._store, LedgerBatch(spend={(key_id, period): usd}), self._lost)
        return False

    # -- observing and stopping --------------------------------------------

    @property
    def pending(self) -> int:
        """Items (decisions and spend totals) submitted and not written yet."""
        with self._cond:
            return len(self._decisions) + len(self._spend) + self._writing

    @property
    def queued(self) -> int:
        """Decisions waiting for a batch (not counting the batch being written)."""
        with self._cond:
            return len(self._decisions)

    def lag(self) -> float:
        """Seconds since the oldest item not yet written was submitted; 0 when none."""
        with self._cond:
            oldest = [t for t in (self._writing_since, self._spend_since,
                                  self._decisions[0][0] if self._decisions else None)
                      if t is not None]
        return max(0.0, self._monotonic() - min(oldest)) if oldest else 0.0

    def use_metrics(self, metrics: GatewayMetrics) -> None:
        """Report to ``metrics`` from now on (the ``humpyard_ledger_*`` set)."""
        self._lost.metrics = metrics

    def refresh_gauges(self) -> None:
        """Set the queue-depth and lag gauges (call before metrics are read)."""
        metrics = self._lost.metrics
        if metrics is not None:
            metrics.ledger_queue_depth.set(self.pending)
            metrics.ledger_lag.set(round(self.lag(), 3))

    def flush(self, timeout: float | None = None) -> bool:
        """Write everything submitted so far; False if ``timeout`` passed first."""
        with self._cond:
            self._hurry += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(
                    lambda: not self._decisions and not self._spend and not self._writing,
                    timeout)
            finally:
                self._hurry -= 1

    @property
    def running(self) -> bool:
        """Whether the writer thread is alive and not closed (``GET /readyz``)."""
        return not self._closed and self._thread.is_alive()

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued, then stop the thread; True when it stopped in time.
        Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the writer thread -------------------------------------------------

    def _take(self) -> LedgerBatch | None:
        """The next batch, once due; None when closed and drained. Holds the lock."""
        cond = self._cond
        due: float | None = None  # a thread's timed wait is real time, whatever the clock
        while True:
            if not self._decisions and not self._spend:
                if self._closed:
                    return None
                cond.wait()
                continue
            if self._closed or self._hurry or len(self._decisions) >= self._max_batch:
                break
            now = time.monotonic()
            if due is None:
                due = now + self._linger
            if now >= due:
                break
            cond.wait(due - now)
        n = min(len(self._decisions), self._max_batch)
        since = [t for t in (self._spend_since, self._decisions[0][0] if n else None)
                 if t is not None]
        self._writing_since = min(since)
        popleft = self._decisions.popleft
        batch = LedgerBatch(decisions=[popleft()[1] for _ in range(n)], spend=self._spend)
        self._spend, self._spend_since = {}, None
        self._writing = len(batch)
        return batch

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = self._take()
            if batch is None:
                return
            started = self._monotonic()
            try:
                self._write_when_free(batch)
            finally:
                metrics = self._lost.metrics
                if metrics is not None:
                    try:
                        metrics.ledger_write_seconds.observe(self._monotonic() - started)
                        metrics.ledger_batch_size.observe(len(batch))
                    except Exception:  # metrics must never kill the writer thread
                        pass
                with self._cond:
                    self._writing, self._writing_since = 0, None
                    self._cond.notify_all()


    def _write_when_free(self, batch: LedgerBatch) -> None:
        """Write ``batch``; while the store's write lock is held elsewhere (another
        process on the SQLite file, past its busy wait), keep the batch and try again,
        so a long-held lock loses nothing: new items queue behind it, within
        ``max_pending``. Once closing, a busy store loses the batch (logged whole)
        rather than hold up the exit."""
        waited = False
        while True:
            with self._cond:
                closing = self._closed
            try:
                perform(self._store, batch, self._lost, busy=not closing)
            except StoreBusy:
                if not waited:
                    waited = True
                    logger.warning("ledger write waiting: the file's write lock is held "
                                   "elsewhere; %d items kept and retried", len(batch))
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, BUSY_RETRY_SECS)
                continue
            if waited:
                logger.warning("ledger write done after waiting for the write lock")
            return


class InlineWriter:
    """``BackgroundWriter``'s interface for a store that does no I/O (``MemoryStore``):
    each item is written at once in the caller's thread. Handing it to a thread costs
    more than the write itself (a wake-up and two GIL hand-offs per request)."""

    pending = 0
    running = True  # nothing to stop: each write happens in its caller

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lost = _Lost()

    def submit_decision(self, decision: Decision) -> bool:
        perform(self._store, LedgerBatch(decisions=[decision]), self._lost)
        return True

    def submit_spend(self, key_id: str, period: str, usd: float) -> bool:
        perform(self._store, LedgerBatch(spend={(key_id, period): usd}), self._lost)
        return True

    def lag(self) -> float:
        return 0.0

    def use_metrics(self, metrics: GatewayMetrics) -> None:
        self._lost.metrics = metrics

    def refresh_gauges(self) -> None:
        metrics = self._lost.metrics
        if metrics is not None:
            metrics.ledger_queue_depth.set(0)
            metrics.ledger_lag.set(0.0)

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = None) -> bool:
        return True


def writer_for(store: Any) -> BackgroundWriter | InlineWriter:
    """The writer a store wants: inline for the in-process memory store, else a thread."""
    if getattr(store, "kind", None) == "memory":
        return InlineWriter(store)
    return BackgroundWriter(store)
