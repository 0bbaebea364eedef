"""``Awaited``: the store calls a request waits for, kept from holding it up.

A request waits for a store call when its key's budget lease needs a new slice
or its per-key limits are counted in the store (``leases.Leases``). Against a
store that does not answer (a partition, an endpoint that swallows packets)
each such call would take the client's own timeouts, and while the store is
down every request of the key would pay them again. So these calls run:

- on threads of their own (``THREADS``), never on the event loop's default
  executor, which the background work shares and an outage fills with calls
  waiting for their timeouts;
- bounded: a request waits at most ``WAIT_SECS`` for one, then gets
  ``StoreUnavailable`` (the call finishes in its thread, and what it learns is
  kept: a lease write updates the lease's book there; what nobody will use is
  undone by the caller's ``on_late``: a slot taken for a request that went on
  without it);
- not at all while the store is known to be down: after a call fails as
  unavailable (``failed``), calls raise ``StoreUnavailable`` at once for a pause
  that doubles with each outage's failures (``FIRST_PAUSE_SECS`` up to
  ``MAX_PAUSE_SECS``); the first call after the pause asks the store again, and
  any call that succeeds (a request's, or the background upkeep's:
  ``succeeded``) ends it.

The caller then admits on its own view, as it does for any store failure
(docs/routing.md, "The bound"); the outage and its end are logged once each.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from humpyard.errors import StoreUnavailable

log = logging.getLogger("humpyard.leases")
T = TypeVar("T")

THREADS = 4
"""Store calls requests wait for, at once."""
WAIT_SECS = 3.0
"""The longest a request waits for one store call."""
FIRST_PAUSE_SECS = 1.0
MAX_PAUSE_SECS = 30.0
"""How long calls are skipped after the store failed: doubling from the first."""


class Awaited:
    """See the module docstring. ``monotonic``: the clock the pauses are timed by."""

    def __init__(self, monotonic: Callable[[], float], *, threads: int = THREADS,
                 wait_secs: float = WAIT_SECS) -> None:
        self._monotonic = monotonic
        self._threads = threads
        self.wait_secs = wait_secs
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._pause = 0.0
        self._until = 0.0
        self._up = True

    def down(self) -> bool:
        """Whether calls are being skipped (the store failed within the pause)."""
        return self._monotonic() < self._until

    def check(self) -> None:
        """``StoreUnavailable`` while ``down()``: the store is not asked in the pause."""
        if self.down():
            raise StoreUnavailable("the store failed moments ago; not asked again yet")

    def failed(self, why: object) -> None:
        """A store call failed as unavailable: skip calls for the next pause (one
        failure per pause counts; the pause doubles with each)."""
        now = self._monotonic()
        with self._lock:
            if now < self._until:
                return
            self._pause = min(self._pause * 2, MAX_PAUSE_SECS) if self._pause \
                else FIRST_PAUSE_SECS
            self._until = now + self._pause
            first, self._up = self._up, False
        if first:
            log.warning("the store is unavailable (%s): budgets and per-key limits are "
                        "counted on this process's own view until it answers", why)

    def succeeded(self) -> None:
        """A store call succeeded: the store is back, no call is skipped."""
        with self._lock:
            back = not self._up
            self._pause, self._until, self._up = 0.0, 0.0, True
        if back:
            log.warning("the store answers again: budgets and per-key limits are "
                        "counted in it")

    async def run(self, fn: Callable[..., T], *args: Any,
                  on_late: Callable[[T], object] | None = None, **kw: Any) -> T:
        """``fn(*args, **kw)`` on this object's threads, awaited at most ``wait_secs``;
        ``StoreUnavailable`` at once while ``down()``. ``on_late`` gets the result of a
        call that succeeded after its caller stopped waiting (timed out or cancelled),
        to undo what nobody will use (a slot taken for a request admitted without it)."""
        self.check()
        call = self._executor().submit(fn, *args, **kw)
        done = asyncio.wrap_future(call)
        try:
            result = await asyncio.wait_for(asyncio.shield(done), self.wait_secs)
        except (TimeoutError, asyncio.CancelledError) as exc:
            done.add_done_callback(_retrieve)
            call.add_done_callback(functools.partial(_late, on_late))  # in its thread
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.failed(f"no answer within {self.wait_secs:g} s")
            raise StoreUnavailable(f"the store did not answer within {self.wait_secs:g} s"
                                   ) from None
        except StoreUnavailable as exc:
            self.failed(exc)
            raise
        self.succeeded()
        return result

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                if self._closed:
                    raise StoreUnavailable("the store calls are closed")
                self._pool = ThreadPoolExecutor(
                    self._threads, thread_name_prefix="humpyard-store-awaited")
            return self._pool

    def close(self) -> None:
        """No more calls; those running finish in their threads (not waited for)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


def _retrieve(done: asyncio.Future[Any]) -> None:
    """Nobody awaits ``done`` any more: its outcome is taken, so it is not reported."""
    if not done.cancelled():
        done.exception()


def _late(on_late: Callable[[Any], object] | None, done: Future[Any]) -> None:
    """A call nobody waits for any more ended: a result goes to ``on_late``."""
    if done.cancelled() or done.exception() is not None or on_late is None:
        return
    try:
        on_late(done.result())
    except Exception:  # noqa: BLE001 - an undo that fails leaves what a lease expiry ends
        log.exception("a store call's late result could not be undone")

