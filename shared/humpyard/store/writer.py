"""Keeping the request path off the disk: ``BackgroundWriter`` for ledger writes, ``run`` for reads.

``BackgroundWriter`` owns one daemon thread. The request path hands it
decisions (``submit_decision``) and spend (``submit_spend``); neither ever
blocks nor raises. The thread takes everything queued, up to ``max_batch``
decisions, and writes it with one ``store.write_batch`` call (SQLite: one
transaction), so the more traffic there is, the bigger and cheaper each write
gets. It waits ``linger_secs`` after the first item of a batch so that
moderate traffic is also written in batches, not one transaction per request;
``flush`` and ``close`` cut that wait short.

A batch the store cannot take for now (``StoreUnavailable``: DynamoDB
unreachable or throttling past its own retries; ``StoreBusy``: another process
holds the SQLite file's write lock past the busy wait) is kept, or the part of it
the store did not write, and tried again until the store takes it, so an outage
or a long-held lock loses nothing; only closing during that wait gives it up
(docs/decisions/0006-ledger-overload.md, 0013-reads-off-the-loop.md).

The queue is bounded (docs/decisions/0006-ledger-overload.md): spend is summed
per key and period while it waits, so it takes constant room and is never
shed; decisions beyond ``max_pending`` are not queued. Nothing is lost
silently: every item that is not written (shed at the bound, or refused or
failed by the store) is logged at ERROR on ``humpyard.store`` with its
request id and whole payload as JSON (so it can be replayed) and counted in
``humpyard_ledger_lost_total{kind,reason}`` (``batch_write.py``: one batch's
write, and the account of what it could not write).

The writer does not own the store; close the writer first, then the store.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from humpyard.errors import StoreBusy, StoreUnavailable
from humpyard.store.base import Decision, LedgerBatch
from humpyard.store.batch_write import Kept, Lost, perform
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
UNAVAILABLE_FIRST_SECS = 0.5
UNAVAILABLE_MAX_SECS = 5.0
"""Pauses before trying again a batch an unavailable store could not take (after its
own retries): doubling from the first to the most, each drawn from its top half."""
DEFAULT_LINGER_SECS = 0.025
"""How long the first item of a batch waits for company before it is written."""


async def run(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run a blocking store call (typically a read) in a worker thread and await it."""
    return await asyncio.to_thread(fn, *args, **kw)


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
                 clock: Any = None, name: str = "humpyard-store-writer",
                 rng: random.Random | None = None) -> None:
        if max_pending < 1 or max_batch < 1:
            raise ValueError("max_pending and max_batch must be at least 1")
        self._store = store
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._linger = linger_secs
        self._monotonic: Callable[[], float] = clock.monotonic if clock else time.monotonic
        self._rng = rng or random.Random()
        self._lost = Lost()
        self._cond = threading.Condition()
        self._decisions: deque[tuple[float, Decision]] = deque()
        self._spend: dict[tuple[str, str], float] = {}
        self._spend_since: float | None = None
        self._writing = 0  # items in the batch being written
        self._writing_since: float | None = None
        self._failed_tries = 0  # tries to write that the store was unavailable for
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
        """Write everything submitted so far; False if ``timeout`` passed first, or as
        soon as a try to write fails because the store is unavailable (the writer
        keeps what it holds and goes on trying; a waiting flush makes it try at once,
        and a caller gains nothing by waiting out an outage)."""
        with self._cond:
            self._hurry += 1
            self._cond.notify_all()
            failed = self._failed_tries
            try:
                self._cond.wait_for(lambda: self._failed_tries != failed or self._empty(),
                                    timeout)
                return self._empty()
            finally:
                self._hurry -= 1

    def _empty(self) -> bool:
        return not self._decisions and not self._spend and not self._writing

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
        """Write ``batch``. While the store is unavailable (DynamoDB unreachable or
        throttling past its own retries; the SQLite file's write lock held elsewhere
        past its busy wait), keep what it could not write and try again, so an outage
        loses nothing: new items queue behind it, within ``max_pending``. Once
        closing, an unavailable store loses what is left (logged whole) rather than
        hold up the exit."""
        waited = 0
        while True:
            with self._cond:
                closing = self._closed
            try:
                written = perform(self._store, batch, self._lost, keep=not closing)
            except Kept as kept:
                batch = kept.batch
                with self._cond:
                    self._writing = len(batch)
                    self._failed_tries += 1
                    self._cond.notify_all()  # a waiting flush() returns
                if not waited:
                    logger.warning("ledger write waiting: %s; %d items kept and retried",
                                   _why(kept.cause), len(batch))
                waited += 1
                with self._cond:  # a flush() waiting makes it try again at once
                    self._cond.wait_for(lambda: self._closed or self._hurry > 0,
                                        self._pause(kept.cause, waited))
                continue
            if waited and written:
                logger.warning("ledger write done after %d tries", waited + 1)
            elif waited:  # closing: what the store still did not take is logged above
                logger.warning("ledger write given up after %d tries: the process is "
                               "stopping", waited + 1)
            return

    def _pause(self, cause: StoreUnavailable, tries: int) -> float:
        """Seconds before trying again: a held lock briefly (SQLite waited already);
        an unavailable store doubling, with jitter so processes do not try in step."""
        if isinstance(cause, StoreBusy):
            return BUSY_RETRY_SECS
        rung = min(UNAVAILABLE_FIRST_SECS * 2 ** (tries - 1), UNAVAILABLE_MAX_SECS)
        return self._rng.uniform(rung / 2, rung)


def _why(cause: StoreUnavailable) -> str:
    if isinstance(cause, StoreBusy):
        return "the file's write lock is held elsewhere"
    return f"the store is unavailable ({cause})"


class InlineWriter:
    """``BackgroundWriter``'s interface for a store that does no I/O (``MemoryStore``):
    each item is written at once in the caller's thread. Handing it to a thread costs
    more than the write itself (a wake-up and two GIL hand-offs per request)."""

    pending = 0
    running = True  # nothing to stop: each write happens in its caller

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lost = Lost()

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
