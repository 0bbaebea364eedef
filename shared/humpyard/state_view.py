"""``StateView``: the planner's snapshot of the state a process shares (``snapshot``).

Two ways in, one way out:

- a store that reads the shared state in one call (DynamoDB, and the SQLite
  file of ``serve --workers N``) goes through its ``SharedState`` (one
  read brings breakers, overrides, spend and latency; ``shared_state.py``
  says when it is refreshed), which ``SharedHealth`` and ``SharedLatency``
  read too;
- a process alone on its store (the memory store, a single ``serve``'s
  SQLite file) keeps health and latency in memory and reads overrides and
  spend from the store: the memory store in place, a file in a thread of
  its own so that the request path never reads the disk.

Either way ``snapshot`` returns the same ``StateSnapshot`` and spend is never
taken below what this process added itself (its writer may not have written
it yet). Overrides changed through this process ``invalidate`` the view.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from humpyard.allowance import Allowance
from humpyard.clock import Clock
from humpyard.config.spec import Config
from humpyard.health.pacing import Pacing
from humpyard.latency import LatencyBook
from humpyard.ledger.periods import period_key
from humpyard.overrides import mark_stale
from humpyard.planning.types import EndpointHealth, Override, StateSnapshot
from humpyard.shared_state import SharedState, state_for
from humpyard.store import Store

log = logging.getLogger("humpyard.gateway")


@dataclass
class Shared:
    """Overrides and spend as last read (plus what this process added since)."""

    taken_at: float
    overrides: tuple[Override, ...]
    spend: dict[str, float]  # key id -> spend in ``periods[key id]``
    periods: dict[str, str] = field(default_factory=dict)


class StateView:
    """The snapshot the planner plans on, and the spend this process adds.

    ``config`` is read at every call (a reload swaps it); ``health``,
    ``latency`` and ``pacing`` are the process's books; ``writer`` takes the
    spend to the store. Thread-safe.
    """

    def __init__(self, config: Callable[[], Config], store: Store, clock: Clock, *,
                 writer: Any, health: Any, latency: LatencyBook, allowance: Allowance,
                 pacing: Pacing) -> None:
        self._config = config
        self.store = store
        self.clock = clock
        self.writer = writer
        self.health = health
        self.latency = latency
        self.allowance = allowance
        self.pacing = pacing
        self._lock = threading.Lock()
        self._cached: Shared | None = None
        self._counted: dict[str, tuple[str, float]] = {}  # key id -> (period, usd added)
        self._marked: tuple[tuple[Override, ...], Config, tuple[Override, ...]] | None = None
        self.on_invalidate: Callable[[], object] | None = None  # wakes the override sweep
        self.source = state_for(store, clock)
        # A store on the disk is read into memory here, before serving, and re-read in a
        # thread afterwards (``shared``); the memory store is read in place.
        self._refreshing = False
        self._off_thread = self.source is None and getattr(store, "kind", None) != "memory"
        if self._off_thread:
            self._load(clock.now())
        elif self.source is not None and self.source.stale_ok:
            self.source.current()  # the first read, before serving (later ones off the loop)

    # -- reads ---------------------------------------------------------------------------

    def snapshot(self, now: float | None = None) -> StateSnapshot:
        """Health, latency, overrides and spend as the planner sees them now."""
        now = self.clock.now() if now is None else now
        shared = self.shared(now)
        health = {
            key: EndpointHealth(state=v.state, cold=v.cold, reopens_at=v.reopens_at or 0.0,
                                consecutive_failures=v.consecutive_failures,
                                cooldown_remaining_ms=v.cooldown_remaining_ms,
                                cooldown_source=v.cooldown_source)
            for key, v in self.health.snapshot(now).items()
        }
        return StateSnapshot(health=health, latency=self.latency.figures(now),
                             overrides=shared.overrides, spend_usd=shared.spend, taken_at=now,
                             reserved_usd=self.allowance.reserved(),
                             paced=self.pacing.paced(now))

    def budget_periods(self, now: float) -> dict[str, str]:
        return {k.id: period_key(k.budget.period, now)
                for k in self._config().keys.values() if k.budget}

    def shared(self, now: float) -> Shared:
        """Overrides and spend to plan on at ``now``."""
        source = self.source
        if source is not None:
            return self._from_source(source, now)
        cached = self._cached
        refresh = self._config().state_refresh_ms / 1000
        if cached is not None and now - cached.taken_at < refresh:
            return cached
        if cached is None or not self._off_thread:
            return self._load(now)
        # A store on the disk (SQLite): the request path never reads it. What this
        # process writes (spend, overrides) is in memory already; what others may
        # write to the file is re-read in a thread while the last state is served.
        self._refresh_soon()
        periods = self.budget_periods(now)
        if periods == cached.periods:
            return cached
        # A budget period turned (or a reload changed the keys): what was counted for
        # another period does not count for this one.
        return Shared(taken_at=cached.taken_at, overrides=cached.overrides,
                      spend={k: v for k, v in cached.spend.items()
                             if cached.periods.get(k) == periods.get(k)},
                      periods=periods)

    # -- changes -------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Make the next snapshot re-read overrides and spend from the store.

        The spend this process counted is kept until the store has it, so a
        reload never forgets spend.
        """
        cached = self._cached
        if cached is not None:
            cached.taken_at = float("-inf")
        if self.source is not None:
            self.source.invalidate()
        wake = self.on_invalidate
        if wake is not None:
            try:
                wake()
            except RuntimeError:  # the sweeping loop has closed
                pass

    def reload(self) -> None:
        """Re-read overrides and spend from the store now. Blocking: call off the loop
        (the override handlers do, so that the next request sees their change)."""
        if self.source is None:
            self._load(self.clock.now())
        else:
            self.source.current()

    def add_spend(self, key_id: str, period: str, usd: float) -> None:
        """Count spend at once locally and in the store off the request path.

        The local count is for ``period``; spend of another period (the day
        turned) is left to the store and read back at the next refresh.
        """
        if self.source is not None:
            self.source.note_spend(key_id, period, usd)
        with self._lock:
            before = self._counted.get(key_id)
            total = before[1] if before is not None and before[0] == period else 0.0
            self._counted[key_id] = (period, total + usd)
            cached = self._cached
            if cached is not None and cached.periods.get(key_id, period) == period:
                cached.spend[key_id] = cached.spend.get(key_id, 0.0) + usd
                cached.periods.setdefault(key_id, period)
        if not self.allowance.count_spend(key_id, period, usd):  # else: with the lease
            self.writer.submit_spend(key_id, period, usd)

    # -- the two ways in -----------------------------------------------------------------

    def _refresh_soon(self) -> None:
        """Re-read overrides and spend in a thread of its own, one at a time."""
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def refresh() -> None:
            try:
                self._load(self.clock.now())
            except Exception:  # noqa: BLE001 - _load logs its own failures
                log.exception("shared state refresh failed")
            finally:
                self._refreshing = False

        threading.Thread(target=refresh, name="humpyard-state-refresh", daemon=True).start()

    def _load(self, now: float) -> Shared:
        """Read overrides and spend from the store and make them the cached state."""
        overrides: tuple[Override, ...] = ()
        periods = self.budget_periods(now)
        try:
            if self.store.has_ledger:
                overrides = mark_stale(self.store.list_overrides(now), self._config())
            # Every store keeps spend, the memory store of a gateway without a [ledger] too.
            spend = dict(self.store.spend_for(periods)) if periods else {}
        except Exception:  # noqa: BLE001 - a store outage must not stop traffic
            # Serve on what was last read (retried after one refresh interval).
            log.exception("shared state could not be read; serving on the last snapshot")
            with self._lock:
                cached = self._cached
                if cached is None:
                    cached = Shared(taken_at=now, overrides=(), spend={}, periods=periods)
                else:
                    cached = Shared(taken_at=now, overrides=cached.overrides,
                                    spend=cached.spend, periods=cached.periods)
                self._cached = cached
            return cached
        with self._lock:
            cached = self._cached
            if cached is not None:
                # Spend only grows within a period, and what this process counted may
                # not be written yet (the background writer): keep the larger of the two.
                for key_id, period in periods.items():
                    if cached.periods.get(key_id) == period and key_id in cached.spend:
                        spend[key_id] = max(spend.get(key_id, 0.0), cached.spend[key_id])
            cached = Shared(taken_at=now, overrides=overrides, spend=spend, periods=periods)
            self._cached = cached
        return cached

    def _from_source(self, source: SharedState, now: float) -> Shared:
        """Overrides and spend from the process's shared view (one read for everything
        shared; ``humpyard.shared_state`` says when it is refreshed)."""
        config = self._config()
        source.refresh_secs = config.state_refresh_ms / 1000
        periods = self.budget_periods(now)
        view = source.current(spend=periods, ahead=True)
        marked = self._marked
        if marked is None or marked[0] is not view.overrides or marked[1] is not config:
            marked = (view.overrides, config, mark_stale(view.overrides, config))
            self._marked = marked
        active = tuple(o for o in marked[2] if o.expires_at > now)
        spend = source.spend(view, periods)
        with self._lock:
            for key_id, period in periods.items():
                # What this process added may not be written yet (the background writer):
                # the store's total is never taken below it.
                mine = self._counted.get(key_id)
                if mine is not None and mine[0] == period and mine[1] > spend[key_id]:
                    spend[key_id] = mine[1]
        return Shared(taken_at=now, overrides=active, spend=spend, periods=periods)
