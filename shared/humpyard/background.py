"""``Background``: what a long-lived gateway process does besides serving requests.

- override expiries: recorded as they happen (one audit entry each), by a
  sweep that wakes at the soonest known expiry, at least every
  ``OVERRIDE_SWEEP_SECS``, and whenever the overrides change;
- retention: ledger rows past ``decision_retention_days`` purged hourly;
- quota polling (``quota/poller.py``) when a provider has a quota source;
- with a store shared by several processes (``serve --workers N``): the
  shared view re-read in a thread every half ``state_refresh_ms`` (so a
  request never waits for it) and latency samples written every
  ``LATENCY_FLUSH_SECS`` (never by a request);
- with a store that sums stats in the process (DynamoDB): the sums written
  once due, looked at every fifth of ``stats_flush_secs``, so an idle
  process's stats reach the table (and other processes) as a busy one's do.

Every blocking call runs in a thread of this object's own (``THREADS``, one
per job at most), never the event loop's default executor: against a store
that does not answer, each job's call waits for the client's timeouts (the
retention purge for minutes), and the default threads are left to what
requests wait for. A failure is logged and the work goes on. Lambda runs
none of it (its scheduled poller function does the quota and the expiries).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, runtime_checkable

from humpyard.clock import Clock
from humpyard.config.spec import Config
from humpyard.errors import StoreError
from humpyard.latency_shared import SharedLatency
from humpyard.planning.types import Override
from humpyard.quota.poller import QuotaPoller
from humpyard.shared_state import SharedState
from humpyard.state_view import StateView
from humpyard.store import Store

log = logging.getLogger("humpyard.gateway")
RETENTION_EVERY_SECS = 3600.0
OVERRIDE_SWEEP_SECS = 30.0  # the longest wait between override-expiry sweeps
LATENCY_FLUSH_SECS = 5.0  # shared latency samples are written at most this often
STATS_TICK_SECS = 0.1  # the shortest wait between two looks at the pending stats
THREADS = 5  # the jobs that call the store: retention, overrides, latency, the view, stats
T = TypeVar("T")


@runtime_checkable
class PendingStats(Protocol):
    """A store that sums stats in the process and writes them once ``stats_flush_secs``
    have passed since its last flush (``store/dynamodb_stats.py``)."""

    stats_flush_secs: float

    def flush_stats_when_due(self) -> None:
        """Write the sums if due; a failure is logged by the store, the sums kept."""


class Background:
    """The background work of one process over its ``store`` and ``state`` view."""

    def __init__(self, config: Callable[[], Config], store: Store, clock: Clock,
                 state: StateView, quota: QuotaPoller, latency: Any) -> None:
        self._config = config
        self.store = store
        self.clock = clock
        self.state = state
        self.quota = quota
        self.latency = latency
        self._threads: ThreadPoolExecutor | None = None

    async def _off(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``fn(*args, **kw)`` on the background's own threads."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="humpyard-background")
        return await asyncio.wrap_future(self._threads.submit(fn, *args, **kw))

    async def run(self, stop: asyncio.Event) -> None:
        """Run every job until ``stop`` is set."""
        jobs = [self._retention(stop), self._sweep_overrides(stop)]
        leases = self.state.allowance.leases
        if leases is not None:  # flush, renew and give back leases
            jobs.append(leases.run(stop))
        if isinstance(self.latency, SharedLatency):
            jobs.append(self._flush_latency(stop))
        if isinstance(self.store, PendingStats):
            jobs.append(self._flush_stats(self.store, stop))
        shares = self.state.shares
        if shares is not None:  # a long-lived process on a shared store (not Lambda)
            jobs.append(self._refresh_state(shares, stop))
        if self.quota.providers():
            jobs.append(self.quota.run(stop))
        try:
            await asyncio.gather(*jobs)
        finally:
            threads, self._threads = self._threads, None
            if threads is not None:  # a call still waiting on the store ends on its own
                threads.shutdown(wait=False)

    # -- override expiry -----------------------------------------------------------------

    def expire_overrides(self) -> list[Override]:
        """Record the expiry of every override that has run out (one audit entry each,
        stamped with its ``expires_at``); returns them. Blocking: call off the loop."""
        if not self.store.has_ledger:
            return []
        expired = self.store.expire_due(self.clock.now())
        for ov in expired:
            log.info("override expired id=%s kind=%s subject=%s", ov.id, ov.kind, ov.subject,
                     extra={"override_id": ov.id, "kind": ov.kind, "subject": ov.subject})
        if expired:
            self.state.invalidate()
            self.state.reload()
        return expired

    def _next_expiry_in(self) -> float:
        """Seconds until the soonest known override expiry, at most OVERRIDE_SWEEP_SECS."""
        now = self.clock.now()
        upcoming = [o.expires_at - now for o in self.state.shared(now).overrides
                    if o.expires_at > now]
        return max(0.01, min([OVERRIDE_SWEEP_SECS, *upcoming]) + 0.001)

    async def _sweep_overrides(self, stop: asyncio.Event) -> None:
        """Sweep at each known expiry, at least every OVERRIDE_SWEEP_SECS, and again
        whenever the overrides change (``StateView.invalidate`` wakes it)."""
        if not self.store.has_ledger:
            return
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        self.state.on_invalidate = lambda: loop.call_soon_threadsafe(wake.set)
        try:
            while not stop.is_set():
                wake.clear()
                try:
                    await self._off(self.expire_overrides)
                    wait = await self._off(self._next_expiry_in)
                except Exception as exc:  # noqa: BLE001 - the sweep must never stop the gateway
                    _failed("override expiry sweep", exc)
                    wait = OVERRIDE_SWEEP_SECS
                await first_of(stop, wake, timeout=wait)
        finally:
            self.state.on_invalidate = None

    # -- retention -----------------------------------------------------------------------

    def purge_expired(self) -> int:
        """Delete ledger rows older than ``decision_retention_days``; returns decisions removed."""
        ledger = self._config().ledger
        if ledger is None or not self.store.has_ledger:
            return 0
        return int(self.store.purge(self.clock.now() - ledger.decision_retention_days * 86400))

    async def _retention(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._off(self.purge_expired)
            except Exception as exc:  # noqa: BLE001 - retention must never stop the gateway
                _failed("retention purge", exc)
            await first_of(stop, timeout=RETENTION_EVERY_SECS)

    # -- a store several processes share ---------------------------------------------------

    def flush_latency(self, *, force: bool = False) -> None:
        """Write pending shared latency samples (when due, or now). Blocking: off the loop."""
        if isinstance(self.latency, SharedLatency):
            if force:
                self.latency.flush()
            else:
                self.latency.flush_due()

    async def _flush_latency(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._off(self.flush_latency)
            except Exception as exc:  # noqa: BLE001 - a flush must never stop the gateway
                _failed("latency flush", exc)
            await first_of(stop, timeout=LATENCY_FLUSH_SECS / 5)
        await self._off(self.flush_latency, force=True)

    async def _flush_stats(self, store: PendingStats, stop: asyncio.Event) -> None:
        """Write due stats sums in a thread: without it they waited for the next
        decision write, so an idle process kept them (and a ``kill -9`` lost them)."""
        tick = max(STATS_TICK_SECS, store.stats_flush_secs / 5)
        while not stop.is_set():
            await first_of(stop, timeout=tick)
            try:
                await self._off(store.flush_stats_when_due)
            except Exception as exc:  # noqa: BLE001 - a flush must never stop the gateway
                _failed("stats flush", exc)

    async def _refresh_state(self, source: SharedState, stop: asyncio.Event) -> None:
        """Re-read the shared view every half ``state_refresh_ms`` in a thread, so a
        request never waits for a read and an idle process's view is never older."""
        while not stop.is_set():
            try:
                await self._off(source.refresh)
            except Exception as exc:  # noqa: BLE001 - SharedState logs a failed read itself
                _failed("shared state refresh", exc)
            await first_of(stop, timeout=max(0.01, self._config().state_refresh_ms / 2000))


async def first_of(*events: asyncio.Event, timeout: float) -> None:
    """Wait until any of ``events`` is set, or ``timeout`` seconds pass."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def _failed(job: str, exc: Exception) -> None:
    """A job's failure: one line when the store failed (it did not answer, or refused
    the call: a table deleted under the process; no bug of ours, and the job runs
    again), a traceback for anything else."""
    if isinstance(exc, StoreError):
        log.warning("%s failed: %s", job, exc)
    else:
        log.error("%s failed", job, exc_info=exc)
