"""``RefreshThread``: where a ``SharedState`` (``shared_state.py``) runs its
background refreshes, one after another on one daemon thread of its own."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger("humpyard.state")


def _STOP() -> None:
    """``RefreshThread``'s marker: the thread ends here."""


class RefreshThread:
    """A ``SharedState``'s background refreshes, run in order on one daemon thread that
    starts with the first and ends after ``idle_secs`` without one (a refresh every
    half ``state_refresh_ms`` keeps it). Starting a thread per refresh cost its
    creation, and ``Thread.start`` waits until the new thread runs: on a busy core the
    event loop waited for the scheduler. Handing a refresh over is a queue put.
    Daemon: a read stalled on the network never holds the process at exit."""

    def __init__(self, idle_secs: float = 30.0) -> None:
        self.idle_secs = idle_secs
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False
        self.started = 0  # threads started, for tests

    @property
    def running(self) -> bool:
        """Whether the thread is up (or about to be)."""
        return self._running

    def __call__(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._queue.put(fn)
            if self._running:
                return
            self._running = True
            self.started += 1
        threading.Thread(target=self._run, name="humpyard-state-refresh", daemon=True).start()

    def stop(self) -> None:
        """End the thread once the refreshes queued so far have run (without waiting)."""
        with self._lock:
            if self._running:
                self._queue.put(_STOP)

    def _run(self) -> None:
        while True:
            try:
                fn = self._queue.get(timeout=self.idle_secs)
            except queue.Empty:
                fn = _STOP
            if fn is _STOP:
                with self._lock:  # a put after this sees _running False and starts anew
                    if self._queue.empty():
                        self._running = False
                        return
                continue
            try:
                fn()
            except Exception:  # a refresh logs its own failures; this thread goes on
                logger.exception("shared state refresh failed")
            del fn  # the state it refers to is not held while the thread waits
