"""``ReadPool``: the admin API's store calls, off the event loop on a bounded pool.

A store call may wait on the disk (SQLite) or the network (DynamoDB). The
admin and console handlers (decisions, stats, overrides, audit, quota) and
explain hand theirs to ``ReadPool.run``, which runs them on at most
``threads`` worker threads of its own, so the event loop goes on serving
while they run, and a flood of admin reads can neither pile up threads nor
take the threads ``asyncio.to_thread`` uses for other work. At most
``max_waiting`` calls wait for a thread; one more is refused at once with
``ReadsBusy`` (503), so a flood of slow reads cannot queue without bound.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from humpyard.errors import HumpyardError

T = TypeVar("T")

DEFAULT_THREADS = 1
"""Store calls running at once: SQLite reads in WAL mode run side by side, and on a
2-core machine two are as many as help."""
DEFAULT_MAX_WAITING = 64
"""Store calls waiting for a thread, beyond which one more is refused (503)."""


class ReadsBusy(HumpyardError):
    """Too many store calls already waiting: 503 ``store_busy``, retry later."""

    def __init__(self, waiting: int) -> None:
        super().__init__(f"{waiting} store reads are already waiting; retry shortly",
                         status=503, code="store_busy")


class ReadPool:
    """Runs blocking store calls on at most ``threads`` threads (built on first use)."""

    def __init__(self, threads: int = DEFAULT_THREADS,
                 max_waiting: int = DEFAULT_MAX_WAITING) -> None:
        if threads < 1 or max_waiting < 1:
            raise ValueError("threads and max_waiting must be at least 1")
        self.threads = threads
        self.max_waiting = max_waiting
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._pending = 0  # calls submitted and not finished (running or waiting)
        self.peak_pending = 0

    @property
    def pending(self) -> int:
        """Calls submitted and not finished yet (running or waiting)."""
        return self._pending

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.threads,
                                                    thread_name_prefix="humpyard-store-read")
            return self._executor

    async def run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``fn(*args, **kw)`` on a pool thread; raises what it raises, or ``ReadsBusy``."""
        with self._lock:
            if self._pending >= self.threads + self.max_waiting:
                raise ReadsBusy(self._pending - self.threads)
            self._pending += 1
            self.peak_pending = max(self.peak_pending, self._pending)
        try:
            job = self._pool().submit(functools.partial(fn, *args, **kw))
        except BaseException:
            self._done(None)
            raise
        # Counted until the call itself ends (in its thread), not until its caller
        # stops waiting: a client that leaves does not free a place its call still holds.
        job.add_done_callback(self._done)
        return await asyncio.wrap_future(job)

    def _done(self, _: object) -> None:
        with self._lock:
            self._pending -= 1

    def close(self) -> None:
        """Stop the threads once their calls end; idempotent."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
