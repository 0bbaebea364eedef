"""``SharedHealth``: the ``HealthState`` every instance shares, kept in a ``LiveStateStore``.

Reads come from this instance's snapshot of every breaker. On a store that
reads the shared state in one call (DynamoDB) the snapshot is the breakers
of the instance's ``SharedState`` view (one read for breakers, overrides,
spend and latency together; ``humpyard.shared_state`` says when it is
refreshed); on any other ``LiveStateStore`` it is re-read with one
``get_breakers`` at most every ``refresh_secs``. Either way a warm request
costs no store read of its own. A read never hides this instance's own
transitions: per endpoint, the higher version wins. Transitions are
written at once with compare-and-set on ``BreakerState.version``: the
transition is applied to the state this instance knows and written only
if the store still holds that version. A writer that loses gets the
stored state back with the refusal, re-applies its transition to it and
tries again (``max_attempts`` in all), so no transition is lost and
cooldowns only grow (the pure transitions take the later deadline). A
transition that changes nothing writes nothing.

A failure while the endpoint is cooling down (a call that started before
the trip, or one by an instance whose snapshot predates it) changes nothing
shared and writes nothing: an instance that knows of the cooldown skips the
write, and one that does not learns of it from its one refused write. So a
dead endpoint costs the live item the failures that count towards its trip
and one refused write per stale instance, never a write per failed call
during its cooldown (docs/decisions/0002-dynamodb-layout.md).

The half-open probe lease is part of the state, so the conditional write
decides the probe: of several instances asking at once, exactly one write
succeeds and the others, re-applying ``try_acquire_probe`` to the winner's
state, see the lease and are refused.

Off the event loop (``queued``, what the Gateway builds): the executor
reports transitions from the event loop, and a store write there (a
DynamoDB call, tens of milliseconds; a SQLite file another process holds
locked) would stall every request of the process. So a transition is
applied to this instance's snapshot at once (this instance sees it before
the write) and its compare-and-set runs on one thread of its own, in the
order the transitions happened; a conflict is re-applied there as above.
A write that lands never takes back a later transition this instance
already holds (the higher version wins, as for a read).
The probe lease cannot be optimistic: ``acquire_probe`` is awaited, the
lease taken by the same thread after the transitions before it, so the
probe is sent only once the store says it won. ``flush`` waits for the
queued writes (Lambda, before an answer's last byte: ``aws/build.py``);
``close`` writes them and stops the thread. Without ``queued`` every
call writes in the caller's thread and returns what was stored.

Consistency: another instance's transition is seen here within one refresh.
If the store fails (``StoreError``) the transition is applied to this
instance's snapshot alone and a warning is logged: the gateway keeps
serving, with health local to the instance until the store answers again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from humpyard.clock import Clock
from humpyard.errors import StoreError
from humpyard.health.book import log_transition
from humpyard.health.breaker import (
    FRESH,
    BreakerState,
    EndpointView,
    HealthSettings,
    record_failure,
    record_success,
    release_probe,
    try_acquire_probe,
    view,
)
from humpyard.queued import drained
from humpyard.shared_state import SharedState, state_for
from humpyard.store.base import LiveStateStore

logger = logging.getLogger("humpyard.health")

Transition = Callable[[BreakerState], tuple[bool, BreakerState]]


class SharedHealth:
    """``HealthState`` on a shared store (DynamoDB in Lambda), seen by every instance.

    ``settings`` may be replaced on a configuration reload. ``state`` is the
    instance's ``SharedState`` (default: the store's own, when it has one;
    its ``refresh_secs`` is set to this one). Safe to share between threads:
    the snapshot is swapped under a lock, and concurrent transitions in one
    instance race through the same compare-and-set as those of different
    instances. ``owner`` names this process in the probe leases it takes (a worker
    of ``serve --workers``: its parent gives them back if it dies).
    """

    def __init__(self, store: LiveStateStore, settings: HealthSettings, clock: Clock,
                 refresh_secs: float, *, max_attempts: int = 5,
                 state: SharedState | None = None, queued: bool = False,
                 owner: str = "") -> None:
        self.settings = settings
        self._owner = owner
        self._store = store
        self._clock = clock
        self._refresh_secs = max(0.0, refresh_secs)
        self._max_attempts = max(1, max_attempts)
        self._lock = threading.Lock()
        self._states: dict[str, BreakerState] = {}
        self._stored: set[str] = set()  # keys known to exist in the store
        self._read_at: float | None = None
        self._state = state if state is not None else state_for(store, clock)
        self._generation = -1
        if self._state is not None:
            self._state.refresh_secs = self._refresh_secs
        # The store writes, in order, off the caller's thread (see the module docstring).
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="humpyard-breakers") \
            if queued else None

    # -- reads ---------------------------------------------------------------------

    def _snapshot(self) -> dict[str, BreakerState]:
        """The breakers as of the last refresh, re-read when ``refresh_secs`` have passed."""
        if self._state is not None:
            return self._shared_snapshot(self._state)
        mono = self._clock.monotonic()
        with self._lock:
            fresh = self._read_at is not None and mono - self._read_at < self._refresh_secs
            if fresh:
                return self._states
            self._read_at = mono  # one reader per refresh; the others use the old snapshot
        try:
            raw = self._store.get_breakers()
            states = {k: BreakerState.from_dict(v) for k, v in raw.items()}
        except (StoreError, ValueError) as exc:
            logger.warning("breaker refresh failed; using the last snapshot: %s", exc)
            return self._states
        with self._lock:
            self._states, self._stored = states, set(states)
            return self._states

    def _shared_snapshot(self, state: SharedState, *, refresh: bool = True
                         ) -> dict[str, BreakerState]:
        view = state.current() if refresh else state.peek()
        if view is None:
            return self._states
        with self._lock:
            if view.generation == self._generation:
                return self._states
        read: dict[str, BreakerState] = {}
        for key, raw in view.breakers.items():
            try:
                read[key] = BreakerState.from_dict(raw)
            except (TypeError, ValueError) as exc:
                logger.warning("unreadable breaker state ignored endpoint=%s: %s", key, exc)
        with self._lock:
            if view.generation <= self._generation:
                return self._states
            states = dict(read)
            for key, mine in self._states.items():  # own writes the read may predate
                if key not in states or mine.version > states[key].version:
                    states[key] = mine
            self._states, self._generation = states, view.generation
            self._stored = set(read) | {k for k in self._stored if k in states}
            return self._states

    def get(self, key: str) -> BreakerState:
        """The endpoint's state as of the last refresh; never-seen is ``BreakerState()``."""
        return self._snapshot().get(key, FRESH)

    def view(self, key: str, now: float) -> EndpointView:
        """The endpoint as ``snapshot`` would show it."""
        return view(self.get(key), self.settings, now)

    def snapshot(self, now: float) -> dict[str, EndpointView]:
        """Every endpoint with recorded state, as it looks at ``now``."""
        return {k: view(s, self.settings, now) for k, s in self._snapshot().items()}

    # -- transitions -----------------------------------------------------------------

    def record_failure(
        self, key: str, now: float, retry_after: float | None = None
    ) -> BreakerState:
        """Record a counted failure; ``retry_after`` is a stated time in seconds, unclamped.

        While the endpoint cools down a failure without a stated time writes nothing."""
        settings = self.settings
        if retry_after is None and settings.enabled:
            known = self.get(key)
            if _cooling(known, now):
                return known  # already cold: nothing to share

            def fail(s: BreakerState) -> tuple[bool, BreakerState]:
                if _cooling(s, now):
                    return True, s  # another instance tripped it first
                return True, record_failure(s, settings, now)

            old, new = self._transition(key, fail)
        else:
            old, new = self._transition(
                key, lambda s: (True, record_failure(s, settings, now, retry_after)))
        log_transition(key, old, new, now)
        return new

    def record_success(self, key: str, now: float) -> BreakerState:
        """Record an answered call; closes the breaker (no write when already closed)."""
        old, new = self._transition(key, lambda s: (True, record_success(s, self.settings, now)))
        log_transition(key, old, new, now)
        return new

    def try_acquire_probe(self, key: str, now: float) -> bool:
        """True for a closed endpoint, and for exactly one caller (of all instances) of a
        half-open one. Blocking: on the event loop, ``await acquire_probe``."""
        if self._writes is not None:
            return self._writes.submit(self._lease, key, now).result()
        return self._lease(key, now)

    async def acquire_probe(self, key: str, now: float) -> bool:
        """``try_acquire_probe`` without holding the event loop: the lease is written on
        the writes' thread (after the transitions queued before it) and awaited."""
        if self._writes is None:
            return self._lease(key, now)
        return await asyncio.wrap_future(self._writes.submit(self._lease, key, now))

    def release_probe(self, key: str, now: float) -> BreakerState:
        """Give a won probe back without a verdict."""
        return self._transition(key, lambda s: (True, release_probe(s, self.settings, now)))[1]

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the transitions queued so far are written (or given up); False if
        ``timeout`` seconds passed first. Never raises."""
        return drained(self._writes, timeout)

    def close(self) -> None:
        """Write what is queued and stop the writes' thread."""
        if self._writes is not None:
            self._writes.shutdown(wait=True)

    def _lease(self, key: str, now: float) -> bool:
        return self._apply(
            key, lambda s: try_acquire_probe(s, self.settings, now, self._owner))[2]

    def _transition(self, key: str, step: Transition) -> tuple[BreakerState, BreakerState]:
        """``step`` applied: at once and written here, or (``queued``) at once to this
        instance's snapshot and written on the writes' thread."""
        if self._writes is None:
            old, new, _ = self._apply(key, step)
            return old, new
        old, expected = self._start(key)
        verdict, new = step(old)
        if new is not old:
            # Stored once the queued write lands, which the next transition's write
            # follows: it expects this version (a wrong guess is one refused write).
            self._remember(key, new, stored=True)
            try:
                self._writes.submit(self._write, key, step, old, expected, verdict, new)
            except RuntimeError:  # closed: the process is stopping
                logger.warning("breaker write after close; kept in this instance only "
                               "endpoint=%s", key, extra={"endpoint": key})
        return old, new

    def _start(self, key: str) -> tuple[BreakerState, int | None]:
        """The state a transition applies to, and the version the store should hold."""
        states = (self._snapshot() if self._state is None
                  else self._shared_snapshot(self._state, refresh=False))
        with self._lock:
            old = states.get(key, FRESH)
            return old, (old.version if key in self._stored else None)

    def _apply(self, key: str, step: Transition) -> tuple[BreakerState, BreakerState, bool]:
        """Apply ``step`` with compare-and-set; ``(state it applied to, result, verdict)``.

        With a ``SharedState`` the transition starts from the last view without
        reading: compare-and-set hands back the stored state if it moved.
        """
        old, expected = self._start(key)
        verdict, new = step(old)
        return self._write(key, step, old, expected, verdict, new)

    def _write(self, key: str, step: Transition, old: BreakerState, expected: int | None,
               verdict: bool, new: BreakerState) -> tuple[BreakerState, BreakerState, bool]:
        """Write ``new`` (``step`` applied to ``old``) if the store holds ``expected``;
        on a conflict apply ``step`` to what it holds and try again."""
        for attempt in range(self._max_attempts):
            if attempt:
                verdict, new = step(old)
            if new is old:
                return old, old, verdict
            try:
                ok, current = self._store.put_breaker(key, new.to_dict(), expected)
            except (StoreError, ValueError) as exc:
                logger.warning("breaker write failed; keeping it in this instance only "
                               "endpoint=%s: %s", key, exc, extra={"endpoint": key})
                self._remember(key, new, stored=key in self._stored)
                return old, new, verdict
            if ok:
                self._remember(key, new, stored=True)
                return old, new, verdict
            old = BreakerState() if current is None else BreakerState.from_dict(current)
            expected = None if current is None else old.version
            self._remember(key, old, stored=current is not None, force=current is None)
        logger.warning("breaker write kept losing to other instances endpoint=%s attempts=%d",
                       key, self._max_attempts, extra={"endpoint": key})
        return old, old, False

    def _remember(self, key: str, state: BreakerState, *, stored: bool,
                  force: bool = False) -> None:
        """Hold ``state`` as the endpoint's, unless what is held is newer (``queued``: a
        later transition applied while this one's write was on its way); ``force``
        holds it whatever it replaces (the store holds no state for it)."""
        with self._lock:
            held = self._states.get(key)
            if force or held is None or held.version <= state.version:
                states = dict(self._states)
                states[key] = state
                self._states = states
            if stored:
                self._stored.add(key)
            else:
                self._stored.discard(key)


def _cooling(state: BreakerState, now: float) -> bool:
    """Open, and its cooldown still running: a failure now changes nothing shared."""
    return state.open_until != 0 and now < state.open_until
