"""``StateView``: the planner's snapshot of the state a process shares (``snapshot``).

One way in, one way out: overrides and spend always come from a
``SharedState`` view (``shared_state.py`` says when it is read):

- a store that reads the shared state in one call (DynamoDB, and the SQLite
  file of ``serve --workers N``) has its one ``SharedState``, which
  ``SharedHealth`` and ``SharedLatency`` read too (breakers and latency);
- a process alone on its store (the memory store, a single ``serve``'s
  SQLite file) gets one over the store's overrides and spend
  (``local_state.local_state``), and keeps health and latency in memory;
  its view is served whatever its age while it is re-read (the memory
  store in place, a file in a thread, ``invalidate`` too), so the request
  path never reads the disk (the first read is made before serving).

``snapshot`` returns the ``StateSnapshot``; spend is never taken below what
this process added itself (its writer may not have written it yet).
Overrides changed through this process ``invalidate`` the view. While the
view, the configuration, the budget periods and this process's spend stay
the same and no override has run out, ``shared`` hands back the same
``Shared`` without recomputing it.
"""

from __future__ import annotations

import logging
import math
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
from humpyard.local_state import local_state
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
    spend to the store. ``shares`` is the store's own ``SharedState`` when
    several processes share it (None for a store this process has alone);
    ``source`` is the ``SharedState`` read either way. Thread-safe.
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
        self._counted: dict[str, tuple[str, float]] = {}  # key id -> (period, usd added)
        self._marked: tuple[tuple[Override, ...], Config, tuple[Override, ...]] | None = None
        self._periods: tuple[Config, int, dict[str, str]] | None = None
        # (view, periods, config, source changes, next expiry, the Shared built from them)
        self._memo: tuple[object, object, object, int, float, Shared] | None = None
        self.on_invalidate: Callable[[], object] | None = None  # wakes the override sweep
        self.shares = state_for(store, clock)
        self.source: SharedState = self.shares or local_state(store, clock)
        if self.source.stale_ok:
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

    def spend_known(self, key_id: str, now: float) -> bool:
        """Whether this process knows ``key_id``'s spend in its budget's period at ``now``:
        a store it has alone always tells it; a shared one once a read brought the total
        (until then, with the store unreachable, the key's budget cannot be checked)."""
        if self.shares is None:
            return True
        period = self.budget_periods(now).get(key_id)
        return period is None or self.shares.has_read_spend(key_id, period)

    def budget_periods(self, now: float) -> dict[str, str]:
        """Key id → the label of its budget's period at ``now``, for every budgeted key.

        A period (a UTC day or month) changes only when the UTC day does: the
        labels are kept for the day and the configuration they were made for."""
        return self._budget_periods(self._config(), now)

    def _budget_periods(self, config: Config, now: float) -> dict[str, str]:
        day = int(now // 86400)
        known = self._periods
        if known is not None and known[0] is config and known[1] == day:
            return known[2]
        self.source.refresh_secs = config.state_refresh_ms / 1000
        periods = {k.id: period_key(k.budget.period, now)
                   for k in config.keys.values() if k.budget}
        self._periods = (config, day, periods)
        return periods

    def shared(self, now: float) -> Shared:
        """Overrides and spend to plan on at ``now`` (see the module docstring)."""
        source = self.source
        config = self._config()
        periods = self._budget_periods(config, now)  # sets the refresh of a new config
        view = source.current(spend=periods, ahead=True)
        changes = source.changes
        memo = self._memo
        if (memo is not None and memo[0] is view and memo[1] is periods and memo[2] is config
                and memo[3] == changes and now < memo[4]):
            return memo[5]
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
        shared = Shared(taken_at=now, overrides=active, spend=spend, periods=periods)
        expires = min((o.expires_at for o in active), default=math.inf)
        self._memo = (view, periods, config, changes, expires, shared)
        return shared

    # -- changes -------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Make the next snapshot re-read overrides and spend from the store: at once on a
        shared store (waited for), in a thread for a file this process has alone (its
        last view is served meanwhile: the request path never reads the file; callers
        that must see the change ``reload`` next, as the override handlers do).

        The spend this process counted is kept until the store has it, so a
        reload never forgets spend.
        """
        if self.shares is None and getattr(self.store, "kind", None) != "memory":
            threading.Thread(target=self._reread, name="humpyard-state-refresh",
                             daemon=True).start()
        else:
            self.source.invalidate()
        wake = self.on_invalidate
        if wake is not None:
            try:
                wake()
            except RuntimeError:  # the sweeping loop has closed
                pass

    def close(self) -> None:
        """The gateway is closing: the background refresh thread ends."""
        self.source.close()

    def reload(self) -> None:
        """Re-read overrides and spend from the store now. Blocking: call off the loop
        (the override handlers do, so that the next request sees their change)."""
        if self.shares is None:
            self._reread()
        else:
            self.source.current()

    def _reread(self) -> None:
        """A read of a store this process has alone that began after this call; the view
        it replaces is served until it ends (no caller waits for it)."""
        after = self.source.ticket()
        if self.source.refresh().read_ticket < after:  # joined a read begun before
            self.source.refresh()

    def add_spend(self, key_id: str, period: str, usd: float) -> None:
        """Count spend at once locally and in the store off the request path.

        The local count is for ``period``; spend of another period (the day
        turned) is left to the store and read back at the next refresh.
        """
        with self._lock:
            before = self._counted.get(key_id)
            total = before[1] if before is not None and before[0] == period else 0.0
            self._counted[key_id] = (period, total + usd)
        self.source.note_spend(key_id, period, usd)  # after the count: see ``shared``
        if not self.allowance.count_spend(key_id, period, usd):  # else: with the lease
            self.writer.submit_spend(key_id, period, usd)
