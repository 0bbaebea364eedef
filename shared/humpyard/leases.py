"""Budgets and per-key limits across instances sharing one store: leases and shared counters.

One ``Leases`` per gateway process (or Lambda instance), named by a random
instance id. It talks to the store's ``LeaseStore`` half
(``store/sharing.py``) and never on the event loop: every store call runs in a
worker thread (``awaited.Awaited``'s while a request awaits it: bounded in time
and skipped while the store is down; one background thread for the upkeep and
the writes nobody waits for), except on the memory store, whose calls are a
dict update under a lock and run in place.

**Budget leases.** An instance takes a *slice* of a key's budget for the
period with one conditional write (``lease_budget``: granted only when the
key's spend plus every live lease plus the slice fits in ``usd``), reserves
its requests against the slice locally (``reserve_now``: no store call), and
counts their real cost as *pending* spend. Pending spend is written with the
next lease write of the key (spend added and the lease reduced by it in one
atomic step) or after ``flush_secs`` — on DynamoDB every 10 s, so a key's
period item is written at most once per ``flush_secs`` per instance plus
once per slice, never per request. A lease unused for ``IDLE_SECS`` is given
back, every lease at shutdown; one not renewed within ``lease_secs`` (a
dead instance's) stops counting for everyone else.

The first slice is what the request needs; later ones ``max(need, min(left /
(2 × holders), lease_book.SLICE_FRACTION × usd))`` with ``left`` and ``holders`` from
the last write's answer, granted only while as much again per holder stays
free (so the slices shrink with the room left); when the store refuses it,
the instance asks again for exactly what the request needs, so near the
bound a request is refused only when spend plus every live lease leaves no
room for it: the key never spends more than its budget plus one request's
misestimate, and at most the unused slices of the other instances (and of
dead ones, until they expire) are refused early.

**Per-key limits** shared through the store go through a limit counter
(``limit_blocks.limit_counter``; ``limit_counters.py``): a transaction per
admission and per end on SQLite, blocks of each minute and leased slots on
DynamoDB; its background writes share this instance's thread, and its upkeep
the tick. On the memory store (one process) the limits are its own.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from humpyard.awaited import WAIT_SECS, Awaited
from humpyard.clock import Clock
from humpyard.errors import BudgetUnknown, StoreUnavailable
from humpyard.lease_book import LeaseBook
from humpyard.limit_blocks import limit_counter
from humpyard.queued import drained
from humpyard.store.sharing import LimitCount

log = logging.getLogger("humpyard.leases")
T = TypeVar("T")

LEASE_SECS = 120.0
"""A lease or in-flight slot row not renewed for this long stops counting (a dead instance's)."""
IDLE_SECS = 30.0
"""A lease no request has used for this long is given back."""
FLUSH_SECS = {"memory": 0.0, "sqlite": 0.0, "dynamodb": 10.0}
"""How long settled spend may wait in the instance before it is written, per store kind."""
TICK_SECS = 1.0
"""How often a long-lived process flushes, renews and gives back leases."""


class Leases:
    """This instance's budget leases and its view of the shared per-key limit counters."""

    def __init__(self, store: Any, clock: Clock, *, instance: str | None = None,
                 flush_secs: float | None = None, lease_secs: float = LEASE_SECS,
                 idle_secs: float = IDLE_SECS, wait_secs: float = WAIT_SECS,
                 fallback: Callable[[str, str, float], object] | None = None) -> None:
        self.store = store
        # Where spend goes when a lease write carrying it fails: the ledger writer.
        self.fallback: Callable[[str, str, float], object] = fallback or _drop
        self.clock = clock
        self.instance = instance or secrets.token_hex(4)
        kind = getattr(store, "kind", "")
        self.budgets = callable(getattr(store, "lease_budget", None))
        self.inline = kind == "memory"
        self.flush_secs = FLUSH_SECS.get(kind, 0.0) if flush_secs is None else flush_secs
        self.lease_secs = lease_secs
        self.idle_secs = idle_secs
        self._books: dict[tuple[str, str], LeaseBook] = {}
        self._lock = threading.Lock()  # the books; never held across a store call
        self._io = threading.Lock()  # one lease write at a time
        self._pool: ThreadPoolExecutor | None = None  # upkeep, writes nobody waits for
        self._awaited = Awaited(clock.monotonic, wait_secs=wait_secs)  # a request's calls
        self._closed = False
        # Per-key limits shared through the store (limit_counters.py), or None.
        self.limit_counter = limit_counter(store, clock, self.instance,
                                           lease_secs=lease_secs, later=self._later)

    @property
    def limits(self) -> bool:
        """Whether the store shares per-key limits (a limit counter was made)."""
        return self.limit_counter is not None

    # -- running store calls off the loop -------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any,
                   on_late: Callable[[T], object] | None = None, **kw: Any) -> T:
        if self.inline:
            return fn(*args, **kw)
        return await self._awaited.run(fn, *args, on_late=on_late, **kw)

    def _background(self) -> ThreadPoolExecutor | None:
        """The one thread of the upkeep and of the writes nobody waits for (None once
        closed)."""
        with self._lock:
            if self._closed:
                return None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="humpyard-leases")
            return self._pool

    def _later(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """Run ``fn`` soon, in order, on the background thread (in place on memory)."""
        if self.inline:
            fn(*args, **kw)
            return
        pool = self._background()
        if pool is None:
            fn(*args, **kw)
            return
        try:
            pool.submit(_logged, fn, *args, **kw)
        except RuntimeError:  # shut down meanwhile
            fn(*args, **kw)

    # -- budget leases ----------------------------------------------------------

    def _book(self, key_id: str, period: str, limit: float) -> LeaseBook:
        book = self._books.get((key_id, period))
        if book is None:
            book = self._books[(key_id, period)] = LeaseBook(limit=limit)
        book.limit = limit  # a reload may change the budget
        return book

    def reserve_now(self, key_id: str, period: str, limit: float, usd: float) -> bool:
        """Reserve ``usd`` from the lease already held, without a store call; never from
        a lapsed one (``LeaseBook.lapsed``), which ``take`` writes again first."""
        now = self.clock.now()
        with self._lock:
            book = self._book(key_id, period, limit)
            book.last_use = now
            if book.lapsed(now, self.lease_secs):
                return False
            if book.available() + 1e-12 >= usd:
                book.used += usd
                return True
            return False

    async def take(self, key_id: str, period: str, limit: float, usd: float, *,
                   spend_read: Callable[[], bool] | None = None) -> bool:
        """Reserve ``usd`` of the key's budget, taking a larger lease first when the one
        held cannot cover it; False when the budget has no room for it (across every
        instance's spend and leases). The store unreachable, the instance's own view
        stands, unless it has none (no answered lease write, ``spend_read()`` False):
        ``BudgetUnknown``, as a spend of 0 could pass the budget (ADR 0036)."""
        for _ in range(4):
            if self.reserve_now(key_id, period, limit, usd):
                return True
            with self._lock:
                book = self._book(key_id, period, limit)
                lapsed = book.lapsed(self.clock.now(), self.lease_secs)  # maybe gone: ask for all
                need = usd if lapsed else max(usd - book.available(), 1e-9)
                known = bool(book.written)
            try:
                granted = False
                if known:  # a slice sized by the last answer, then by this one's
                    for _ in range(2):
                        with self._lock:
                            slice_, keep = self._books[(key_id, period)].slice(need)
                        if slice_ <= need:
                            break
                        granted = await self._run(self._write, key_id, period, slice_,
                                                  keep=keep)
                        if granted:
                            break
                if not granted:  # exactly the need: refused only when nothing is left
                    granted = await self._run(self._write, key_id, period, need)
            except Exception as exc:  # noqa: BLE001 - the store is down: the local check
                # stands. An outage is logged once (awaited.py), anything else each time.
                if isinstance(exc, StoreUnavailable) and not known \
                        and spend_read is not None and not spend_read():
                    raise BudgetUnknown(key_id) from exc  # reads fail too: no view
                with self._lock:
                    self._book(key_id, period, limit).used += usd
                if not isinstance(exc, StoreUnavailable):
                    log.exception("budget lease for key %s could not be taken; "
                                  "admitting on this instance's view of the budget", key_id)
                return True
            if not granted:
                return False
        return self.reserve_now(key_id, period, limit, usd)

    def unreserve(self, key_id: str, period: str, usd: float) -> None:
        """A request that reserved ``usd`` has ended (its cost comes with ``spend``)."""
        with self._lock:
            book = self._books.get((key_id, period))
            if book is not None:
                book.used = max(0.0, book.used - usd)

    def spend(self, key_id: str, period: str, usd: float) -> bool:
        """Count ``usd`` spent by the key; written with the lease (True), or False when
        the key has no lease here (the caller writes it the usual way)."""
        if not self.budgets:
            return False
        now = self.clock.now()
        with self._lock:
            book = self._books.get((key_id, period))
            if book is None:
                return False
            book.pending += usd
            if book.since is None:
                book.since = now
            due = now - book.since >= self.flush_secs and not book.flushing
            if due:
                book.flushing = True
        if due:
            self._later(self._flush, key_id, period)
        return True

    def _flush(self, key_id: str, period: str) -> None:
        with self._lock:
            book = self._books.get((key_id, period))
            if book is not None:
                book.flushing = False
        self._write(key_id, period, 0.0)

    def _write(self, key_id: str, period: str, want: float, *, give_back: bool = False,
               keep: float = 0.0) -> bool:
        """One lease write: the pending spend, the lease less it (0 to give it back), and
        ``want`` more if it fits. Blocking: a worker thread's."""
        with self._io:
            with self._lock:
                book = self._books.get((key_id, period))
                if book is None:
                    return False
                spent = book.pending
                held = 0.0 if give_back else max(0.0, book.held - spent)
                limit = book.limit
                now = book.tried = self.clock.now()
            try:
                if not self._closed:  # the pause holds for background writes too
                    self._awaited.check()
                answer = self.store.lease_budget(key_id, period, self.instance, limit=limit,
                                                 spent=spent, held=held, want=want, now=now,
                                                 expires_at=now + self.lease_secs, keep=keep)
            except Exception as exc:
                if isinstance(exc, StoreUnavailable):  # requests do not wait on it now
                    self._awaited.failed(exc)
                if spent:  # the ledger writer writes it, or logs and counts it as lost
                    with self._lock:
                        book.settled(spent)
                    self.fallback(key_id, period, spent)
                raise
            self._awaited.succeeded()
            with self._lock:
                book.settled(spent)
                book.held = answer.held
                book.committed = answer.committed
                book.holders = answer.holders
                book.written = now
            return answer.granted

    def held(self) -> dict[tuple[str, str], float]:
        """(key id, period) → the lease this instance holds (explain, tests)."""
        with self._lock:
            return {k: b.held for k, b in self._books.items() if b.held > 0}

    def unwritten(self) -> float:
        """Spend counted with a lease here and not written yet (tests wait for it)."""
        with self._lock:
            return sum(b.pending for b in self._books.values())

    # -- per-key limits shared through the store -------------------------------

    async def take_limits(self, key_id: str, *, window: float, rpm: int | None,
                          tpm: int | None, parallel: int | None, tokens: int,
                          now: float) -> LimitCount:
        """Count one request in the key's shared limits (``limit_counters.py``), or name
        the limit that refuses it; a store call only when what is held does not do."""
        counter = self.limit_counter
        assert counter is not None, "the store shares no per-key limits"
        held = counter.take_now(key_id, window=window, rpm=rpm, tpm=tpm, parallel=parallel,
                                tokens=tokens)
        if held is not None:
            return held
        def late(count: LimitCount) -> None:
            """The request went on without this count (timed out, or its client left):
            the slot it took goes back."""
            if count.refused is None and parallel is not None:
                counter.release(key_id, window=window, tokens=0, parallel=True)

        return await self._run(counter.take, key_id, window=window, rpm=rpm, tpm=tpm,
                               parallel=parallel, tokens=tokens, now=now, on_late=late)

    def release_limits(self, key_id: str, *, window: float, tokens: int,
                       parallel: bool) -> None:
        if self.limit_counter is not None:
            self.limit_counter.release(key_id, window=window, tokens=tokens, parallel=parallel)

    async def counts(self, key_id: str, window: float, now: float) -> LimitCount:
        counter = self.limit_counter
        assert counter is not None, "the store shares no per-key limits"
        return await self._run(counter.counts, key_id, window=window, now=now)

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the background writes queued so far (a Lambda
        instance's, before it may be frozen); False when they are still running."""
        with self._lock:
            pool = self._pool
        return drained(pool, timeout)

    # -- upkeep ---------------------------------------------------------------

    def tick(self) -> None:
        """Flush due spend, renew leases in use, give back idle ones and those of a past
        period, renew this instance's in-flight slots. Blocking: a worker thread's."""
        now = self.clock.now()
        with self._lock:
            books = list(self._books.items())
        for (key_id, period), book in books:
            try:
                idle = book.used <= 1e-12 and now - book.last_use >= self.idle_secs
                if idle and (book.held > 0 or book.pending > 0):
                    self._write(key_id, period, 0.0, give_back=True)
                elif book.pending > 0 and book.since is not None \
                        and now - book.since >= self.flush_secs:
                    self._write(key_id, period, 0.0)
                elif book.held > 0 and now - book.written >= self.lease_secs / 3:
                    self._write(key_id, period, 0.0)
                if idle and book.held <= 0 and book.pending <= 0:
                    with self._lock:
                        if self._books.get((key_id, period)) is book and book.used <= 1e-12:
                            del self._books[(key_id, period)]
            except Exception as exc:  # noqa: BLE001 - upkeep must never stop the gateway
                if not isinstance(exc, StoreUnavailable):  # an outage is logged once
                    log.exception("budget lease upkeep failed for key %s", key_id)
        if self.limit_counter is not None:
            self.limit_counter.tick()

    async def run(self, stop: asyncio.Event) -> None:
        """A long-lived process's upkeep: ``tick`` every ``TICK_SECS`` off the loop."""
        if not self.budgets and not self.limits:
            return
        if self.limit_counter is not None:
            self.limit_counter.ticking = True  # settled tokens, free slots wait for it
        while not stop.is_set():
            pool = self._background()
            try:
                if pool is not None:  # never the loop's default threads (awaited.py)
                    await asyncio.wrap_future(pool.submit(self.tick))
            except Exception:  # noqa: BLE001
                log.exception("lease upkeep failed")
            try:
                await asyncio.wait_for(stop.wait(), TICK_SECS)
            except TimeoutError:
                pass

    def close(self) -> None:
        """Write pending spend and give every lease back (shutdown). Blocking."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            books = list(self._books)
        self._awaited.close()
        if pool is not None:
            pool.shutdown(wait=True)
        if self.limit_counter is not None:
            self.limit_counter.close()
        for key_id, period in books:
            try:
                self._write(key_id, period, 0.0, give_back=True)
            except Exception as exc:  # noqa: BLE001 - the lease lapses on its own
                log.warning("budget lease for key %s could not be given back (%s)", key_id,
                            exc, exc_info=not isinstance(exc, StoreUnavailable))


def _drop(key_id: str, period: str, usd: float) -> None:
    log.error("spend not written key_id=%s period=%s usd=%s: its lease write failed",
              key_id, period, usd)


def _logged(fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
    try:
        fn(*args, **kw)
    except StoreUnavailable:  # logged once for the outage (awaited.py); its spend went
        pass  # to the ledger writer, which keeps it until the store answers
    except Exception:  # noqa: BLE001 - a background write must not vanish silently
        log.exception("background lease write failed")

