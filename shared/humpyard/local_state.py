"""The shared-state view of a store a process has alone (the memory store, one ``serve``'s
SQLite file): ``local_state`` is a ``SharedState`` over ``LocalStateReader``, which
brings back overrides and spend only (breakers and latency figures live in the
process's memory then). See ``shared_state``'s docstring for how such a view is
served."""

from __future__ import annotations

from collections.abc import Callable

from humpyard.clock import Clock
from humpyard.shared_state import SharedState
from humpyard.store.base import Store
from humpyard.store.sharing import SharedRead, SharedRequest


class LocalStateReader:
    """``read_shared`` over a store a process has alone (memory, one ``serve``'s SQLite
    file): the overrides and the spend asked for, in one call; no breakers and no latency
    buckets (this process keeps those in memory). Raises what the store raises."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def read_shared(self, request: SharedRequest) -> SharedRead:
        store = self._store
        overrides = store.list_overrides(self._clock.now()) if store.has_ledger else []
        # Every store keeps spend, the memory store of a gateway without a [ledger] too.
        spend = dict(store.spend_for(dict(request.spend))) if request.spend else {}
        return SharedRead(breakers={}, spend=spend, latency={}, overrides_version=0,
                          overrides=overrides)


def _at_once(fn: Callable[[], None]) -> None:
    fn()


def local_state(store: Store, clock: Clock) -> SharedState:
    """The ``SharedState`` of a store this process has alone (see the module docstring):
    the memory store read in place, any other in a thread."""
    in_place = getattr(store, "kind", None) == "memory"
    return SharedState(LocalStateReader(store, clock), clock,
                       background=_at_once if in_place else None, stale_ok=True)
