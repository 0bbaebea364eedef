"""``SharedState``: one instance's view of what every instance shares, refreshed in one read.

On AWS, breakers, overrides, spend and latency figures live in DynamoDB.
An instance keeps one ``SharedView`` of all of them and refreshes it with
one ``read_shared`` call (one ``BatchGetItem``; a Query of the overrides
only when their version moved). ``SharedHealth``, ``SharedLatency`` and the
gateway's snapshot all read this view, so a refresh costs one call whatever
asks for it.

When a view is served (``refresh_secs`` is ``state_refresh_ms``):

- younger than ``AHEAD`` × ``refresh_secs``: as it is;
- older, but younger than ``refresh_secs``: as it is, while one refresh
  runs in a worker thread (off the request's critical path);
- ``refresh_secs`` old or more (an instance that was idle or frozen, or an
  ``invalidate``): the caller waits for a refresh (joining the one in flight),
  so no request is planned on state older than ``state_refresh_ms``.

A store whose reads are local (``stale_reads_ok``: the SQLite file of
``serve --workers N``) never makes a caller wait for an old view: past half
its age it is served while one refresh runs in a thread, whatever its age.
Only a missing view (the first read, or after ``invalidate``) is waited for.

A view's age counts from the start of the read that made it. A failed read
is logged (an outage's first, then a count at most once a minute, and the
read that succeeds again) and the last view is kept, counted as fresh for
another ``refresh_secs`` (the first read failing gives an empty view), so a
store outage neither stops traffic nor makes every request wait on it.

Spend the instance adds itself (``note_spend``) counts at once: ``spend``
is the total the last good read brought plus what was added since that read
began, summed per key and period in two parts, before and after the read in
flight began (a failed read merges them), so it takes the same room however
long reads fail. ``ticket`` is a counter every read takes when it begins and
every local change when it happens (the clock cannot order events of one
instant): a view is valid when its read began after the last ``invalidate``. Latency
buckets are read every ``latency_refresh_secs`` only (they change when
instances flush, every few seconds): the whole window on the first read,
then the current and previous bucket. ``state_for(store, clock)`` gives
each store object (one per instance) its one ``SharedState``.

A store a process has alone (the memory store, a single ``serve``'s SQLite
file) goes through the same ``SharedState`` (``local_state.local_state``): its
reader (``LocalStateReader``) brings back overrides and spend only (breakers and
latency figures live in the process's memory then), and its view is
served whatever its age while a refresh runs (``stale_ok``: this process
is the only writer, so what it adds itself, counted at once, is all that
can have changed; the re-read past half ``refresh_secs`` only folds that
into the view, and notices a budget period's turn). The memory store is
read in place, a file in a thread.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from humpyard.clock import Clock
from humpyard.logsink import Sampled
from humpyard.planning.types import Override
from humpyard.refresh_thread import RefreshThread
from humpyard.store.sharing import SharedRead, SharedRequest, SharedStateReader

logger = logging.getLogger("humpyard.state")
OUTAGE_LOG_SECS = 60.0  # while reads fail: the first logged, then a line this often

AHEAD = 0.5
"""The fraction of ``refresh_secs`` after which a view is refreshed in the background."""

Latency = dict[str, dict[int, tuple[int, float]]]  # target -> bucket -> (count, total_ms)


@dataclass(frozen=True)
class SharedView:
    """The shared state as last read. ``generation`` grows with every read that succeeds."""

    generation: int = 0
    read_at: float = -math.inf
    read_ticket: int = -1
    breakers: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    overrides: tuple[Override, ...] = ()  # every stored one, expired ones included
    spend: Mapping[tuple[str, str], float] = field(default_factory=dict)
    latency: Mapping[str, Mapping[int, tuple[int, float]]] = field(default_factory=dict)
    latency_ticket: int = -1  # latency is read less often than the rest


class SharedState:
    """The refresh policy of the module docstring, over a ``SharedStateReader``.

    ``background`` runs a refresh off the caller's thread (default: a
    ``RefreshThread`` of its own; tests may pass one that runs it at once).
    Thread-safe.
    """

    def __init__(self, store: SharedStateReader, clock: Clock, refresh_secs: float = 1.0, *,
                 background: Callable[[Callable[[], None]], None] | None = None,
                 stale_ok: bool = False) -> None:
        self.refresh_secs = max(0.0, refresh_secs)
        self.stale_ok = stale_ok
        self._store = store
        self._clock = clock
        self._background = background or RefreshThread()
        self._lock = threading.Lock()
        self._view: SharedView | None = None
        self._inflight: threading.Event | None = None
        self._invalid_ticket = 0
        self._spend_wanted: dict[str, str] = {}
        self._spend_given: object = None  # the mapping last given to ``current``
        self._complete: SharedView | None = None  # a view holding every spend total wanted
        # Spend noted since the last good read, summed per (key, period): before the
        # read in flight began, and after (a failed read merges them): constant room.
        self._spend_before: dict[tuple[str, str], float] = {}
        self._spend_after: dict[tuple[str, str], float] = {}
        self._reading = False  # a read has taken its ticket and not ended
        self._tickets = 0
        self._overrides_version: int | None = None
        self._latency_window: tuple[int, float] | None = None  # (bucket_secs, max_age_secs)
        self.latency_refresh_secs = 5.0
        self._latency_read_at: float | None = None
        self._latency_oldest = 0
        self.reads = 0  # refreshes started, for tests and the docs' cost table
        self._failed = 0  # reads failed since the last that did not (an outage)
        self._said = Sampled(clock.monotonic, OUTAGE_LOG_SECS)
        self._local = threading.local()

    # -- what the readers want -------------------------------------------------------

    def want_latency(self, *, bucket_secs: int, max_age_secs: float,
                     refresh_secs: float) -> None:
        """Read latency buckets of ``bucket_secs`` over ``max_age_secs``, every ``refresh_secs``."""
        with self._lock:
            self._latency_window = (int(bucket_secs), float(max_age_secs))
            self.latency_refresh_secs = max(0.0, refresh_secs)

    def invalidate(self) -> None:
        """The next ``current`` waits for a read that starts after this call."""
        with self._lock:
            self._invalid_ticket = self._ticket_locked()

    def ticket(self) -> int:
        """The next number of the instance's order of reads and local changes."""
        with self._lock:
            return self._ticket_locked()

    def _ticket_locked(self) -> int:
        self._tickets += 1
        return self._tickets

    @property
    def changes(self) -> int:
        """A number that moves with every read and every local change: while it and the
        view stay the same, so does what ``spend`` returns."""
        return self._tickets

    def note_spend(self, key_id: str, period: str, usd: float) -> None:
        """Spend this instance added (and is writing): counted at once."""
        with self._lock:
            self._ticket_locked()
            into = self._spend_after if self._reading else self._spend_before
            into[(key_id, period)] = into.get((key_id, period), 0.0) + usd

    def close(self) -> None:
        """End the background refresh thread, if this state has one (the gateway closing)."""
        stop = getattr(self._background, "stop", None)
        if stop is not None:
            stop()

    # -- reading -------------------------------------------------------------------------

    def peek(self) -> SharedView | None:
        """The last view, however old, without reading; None before the first read and
        after ``invalidate``."""
        with self._lock:
            view = self._view
            return view if view is not None and view.read_ticket > self._invalid_ticket else None

    def has_read_spend(self, key_id: str, period: str) -> bool:
        """Whether a read has brought ``key_id``'s spend total for ``period`` (however long
        ago, invalidated or not): False before the store first answered for it."""
        with self._lock:
            view = self._view
        return view is not None and (key_id, period) in view.spend

    @contextlib.contextmanager
    def no_reads(self) -> Iterator[None]:
        """In this thread, for the block: ``current`` serves the last view whatever its age
        and reads only when there is none (never read, or invalidated). For work after
        a request's answer (gauges), which must not pay for the next request's read."""
        before = getattr(self._local, "no_reads", False)
        self._local.no_reads = True
        try:
            yield
        finally:
            self._local.no_reads = before

    def current(self, spend: Mapping[str, str] | None = None, *,
                ahead: bool = False) -> SharedView:
        """The view to plan on now: read first when it is ``refresh_secs`` old (see the module
        docstring). ``ahead`` (the planner's call, once per request) also starts a
        background refresh of a view past half its age, or missing a spend total;
        other callers only wait when they must, so a request pays for one read at most.
        ``spend`` (key id → period) names the spend totals to keep from the next read on;
        a mapping once given is never changed in place (the same one given again is
        taken as unchanged)."""
        if spend is not None and spend is not self._spend_given:
            with self._lock:
                self._spend_given = spend
                if spend != self._spend_wanted:
                    self._spend_wanted = dict(spend)
                    self._complete = None
        view = self._complete  # the common case, without the lock: fresh and complete
        if view is not None and view is self._view and view.read_ticket > self._invalid_ticket \
                and self._clock.monotonic() - view.read_at < self.refresh_secs * AHEAD:
            return view
        if getattr(self._local, "no_reads", False):
            found = self.peek()
            if found is not None:
                return found
        for _ in range(3):  # a read that began before an ``invalidate`` does not count
            mono = self._clock.monotonic()
            start: Callable[[], None] | None = None
            with self._lock:
                view = self._view
                valid = view is not None and view.read_ticket > self._invalid_ticket
                age = mono - view.read_at if view is not None and valid else math.inf
                served = view is not None and (age < self.refresh_secs
                                               or (self.stale_ok and age < math.inf))
                if served:
                    assert view is not None
                    missing = ahead and view is not self._complete and self._lacks_locked(view)
                    stale = age >= self.refresh_secs * AHEAD
                    if ((ahead or self.stale_ok) and (stale or missing)
                            and self._inflight is None):
                        start = self._reader(mono)
                else:
                    inflight = self._inflight
                    if inflight is None:
                        read = self._reader(mono)
            if served:
                assert view is not None
                if start is not None:  # outside the lock: it may run the read at once
                    self._background(start)
                return view
            if inflight is None:
                read()
            else:
                inflight.wait()
        return self._view or SharedView()

    def _lacks_locked(self, view: SharedView) -> bool:
        """Whether ``view`` misses a spend total now wanted (remembered when it does not)."""
        if any((k, p) not in view.spend for k, p in self._spend_wanted.items()):
            return True
        self._complete = view
        return False

    def refresh(self) -> SharedView:
        """Read now (or join the read in flight) and return the view. Blocking: for the
        background refresh of a store whose views are served stale (``stale_ok``)."""
        with self._lock:
            inflight = self._inflight
            if inflight is None:
                read = self._reader(self._clock.monotonic())
        if inflight is None:
            read()
        else:
            inflight.wait()
        return self._view or SharedView()

    def spend(self, view: SharedView, periods: Mapping[str, str]) -> dict[str, float]:
        """Per key: the total ``view`` (the last view) read for its period, plus what this
        instance added since that read began."""
        out = {k: view.spend.get((k, p), 0.0) for k, p in periods.items()}
        with self._lock:
            for pending in (self._spend_before, self._spend_after):
                for (key_id, period), usd in pending.items():
                    if periods.get(key_id) == period:
                        out[key_id] += usd
        return out

    def _reader(self, started: float) -> Callable[[], None]:
        """A read starting now, marked in flight (call with the lock held)."""
        done = self._inflight = threading.Event()
        return lambda: self._read(started, done)

    def _read(self, started: float, done: threading.Event) -> None:
        with self._lock:
            ticket = self._ticket_locked()
            self._reading = True  # spend noted from now on is not in what it reads
        try:
            with self._lock:
                request, latency_buckets = self._request_locked(started)
            self.reads += 1
            got = self._store.read_shared(request)
        except Exception as exc:  # noqa: BLE001 - a store outage must not stop traffic
            self._failed += 1  # said at its first failure, then once a minute at most
            if n := self._said.due():
                logger.warning("shared state could not be read (%d time(s) since the last "
                               "line); serving on the last view: %s", n, exc)
            with self._lock:  # fresh for another refresh; its spend as it was
                self._view = replace(self._view or SharedView(), read_at=started,
                                     read_ticket=ticket)
                after, self._spend_after, self._reading = self._spend_after, {}, False
                for k, usd in after.items():
                    self._spend_before[k] = self._spend_before.get(k, 0.0) + usd
                self._inflight = None
            done.set()
            return
        if self._failed:
            logger.warning("shared state read again after %d failed reads", self._failed)
            self._failed, self._said = 0, Sampled(self._clock.monotonic, OUTAGE_LOG_SECS)
        with self._lock:
            self._view = self._next_view_locked(started, ticket, got, latency_buckets)
            self._inflight = None
        done.set()

    def _request_locked(self, started: float) -> tuple[SharedRequest, tuple[int, ...]]:
        """The request of a read starting now, and the latency buckets it reads (the
        first is the oldest bucket still in the window when the whole window is read)."""
        buckets: tuple[int, ...] = ()
        if self._latency_window is not None and (
                self._latency_read_at is None
                or started - self._latency_read_at >= self.latency_refresh_secs):
            bucket_secs, max_age = self._latency_window
            now = self._clock.now()
            newest = int(now // bucket_secs)
            oldest = max(0, int((now - max_age) // bucket_secs))
            first = oldest if self._latency_read_at is None else max(oldest, newest - 1)
            buckets = tuple(range(first, newest + 1))
            self._latency_oldest = oldest
        return SharedRequest(spend=dict(self._spend_wanted), latency_buckets=buckets,
                             overrides_version=self._overrides_version), buckets

    def _next_view_locked(self, started: float, ticket: int, got: SharedRead,
                          buckets: tuple[int, ...]) -> SharedView:
        old = self._view or SharedView()
        overrides = old.overrides
        if got.overrides is not None:
            overrides = tuple(got.overrides)
        self._overrides_version = got.overrides_version
        latency: Mapping[str, Mapping[int, tuple[int, float]]] = old.latency
        latency_ticket = old.latency_ticket
        if buckets:
            self._latency_read_at, latency_ticket = started, ticket
            latency = _merge_latency(old.latency, got.latency, buckets, self._latency_oldest)
        self._spend_before, self._spend_after, self._reading = self._spend_after, {}, False
        spend = {(k, p): got.spend.get(k, 0.0) for k, p in self._spend_wanted.items()}
        return SharedView(generation=old.generation + 1, read_at=started, read_ticket=ticket,
                          breakers=got.breakers, overrides=overrides, spend=spend,
                          latency=latency, latency_ticket=latency_ticket)


def _merge_latency(old: Mapping[str, Mapping[int, tuple[int, float]]], new: Latency,
                   buckets: tuple[int, ...], oldest: int) -> Latency:
    """``old`` with the buckets just read replaced by ``new``, and those before ``oldest``
    (out of the window) dropped."""
    read = set(buckets)
    out: Latency = {}
    for target, cells in old.items():
        kept = {b: c for b, c in cells.items() if b not in read and b >= oldest}
        if kept:
            out[target] = kept
    for target, cells in new.items():
        out.setdefault(target, {}).update(cells)
    return out


_STATES: weakref.WeakKeyDictionary[Any, SharedState] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def state_for(store: object, clock: Clock) -> SharedState | None:
    """The one ``SharedState`` of ``store`` (an instance's store object), or None when the
    store cannot read the shared state in one call (memory, SQLite)."""
    if not callable(getattr(store, "read_shared", None)):
        return None
    with _STATES_LOCK:
        found = _STATES.get(store)
        if found is None:
            found = _STATES[store] = SharedState(
                store, clock,  # type: ignore[arg-type]
                stale_ok=bool(getattr(store, "stale_reads_ok", False)))
        return found
