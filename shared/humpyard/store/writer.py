"""Keeping the request path off the disk: ``BackgroundWriter`` for writes, ``run`` for reads.

``BackgroundWriter`` owns one daemon thread that performs queued store
calls in submission order. ``submit`` never blocks and never raises: a
write that fails is logged on ``humpyard.store`` at ERROR with its request
id and the unsaved payload as JSON (so a decision is never lost without a
trace). The writer does not own the store; close the writer first, then
the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger("humpyard.store")

T = TypeVar("T")

DEFAULT_MAX_PENDING = 100_000

_Call = tuple[str, tuple[Any, ...], dict[str, Any]]


async def run(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run a blocking store call (typically a read) in a worker thread and await it."""
    return await asyncio.to_thread(fn, *args, **kw)


def _request_id(args: tuple[Any, ...], kw: dict[str, Any]) -> str | None:
    if isinstance(kw.get("request_id"), str):
        return kw["request_id"]
    for value in (*args, *kw.values()):
        if isinstance(value, dict) and isinstance(value.get("request_id"), str):
            return value["request_id"]
    return None


def _payload_json(args: tuple[Any, ...], kw: dict[str, Any]) -> str:
    dicts = [v for v in (*args, *kw.values()) if isinstance(v, dict)]
    payload: Any = dicts[0] if len(dicts) == 1 else {"args": list(args), "kwargs": kw}
    try:
        return json.dumps(payload, default=str, separators=(",", ":"))
    except (TypeError, ValueError):  # circular or otherwise unencodable
        return repr(payload)


def log_unsaved(fn_name: str, args: tuple[Any, ...], kw: dict[str, Any], why: object,
                exc: BaseException | None = None) -> None:
    """Log a store call that did not happen, with everything needed to replay it."""
    logger.error("store write %s failed request_id=%s: %s; unsaved: %s",
                 fn_name, _request_id(args, kw), why, _payload_json(args, kw), exc_info=exc)


class BackgroundWriter:
    """Performs ``store.<fn_name>(...)`` calls on one daemon thread, in order.

    ``max_pending`` bounds the queue: beyond it a call is not queued but
    logged as unsaved (a stuck disk must not grow memory without limit nor
    block requests). After ``close`` a submitted call runs synchronously in
    the caller's thread, so shutdown stragglers are still written.
    """

    def __init__(self, store: Any, *, max_pending: int = DEFAULT_MAX_PENDING,
                 name: str = "humpyard-store-writer") -> None:
        self._store = store
        self._max_pending = max_pending
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._pending = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Calls queued or running."""
        with self._cond:
            return self._pending

    def submit(self, fn_name: str, *args: Any, **kw: Any) -> bool:
        """Queue ``store.fn_name(*args, **kw)``; True if queued, False if it ran or was dropped.

        Never raises and never blocks (except after ``close``, when the call
        runs inline).
        """
        with self._cond:
            closed = self._closed
            if not closed:
                if self._pending >= self._max_pending:
                    log_unsaved(fn_name, args, kw, f"{self._pending} writes already pending")
                    return False
                self._pending += 1
                self._queue.put((fn_name, args, kw))
                return True
        self._perform((fn_name, args, kw))
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call submitted so far has run; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the thread; True when it stopped in time. Idempotent."""
        with self._cond:
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while (call := self._queue.get()) is not None:
            try:
                self._perform(call)
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def _perform(self, call: _Call) -> None:
        perform(self._store, call)


def perform(store: Any, call: _Call) -> None:
    """``store.<fn_name>(*args, **kw)``; a failure is logged as unsaved, never raised."""
    fn_name, args, kw = call
    try:
        getattr(store, fn_name)(*args, **kw)
    except Exception as exc:
        try:
            log_unsaved(fn_name, args, kw, f"{type(exc).__name__}: {exc}", exc)
        except Exception:  # logging must never kill the writer thread
            pass


class InlineWriter:
    """``BackgroundWriter``'s interface for a store that does no I/O (``MemoryStore``):
    each call runs at once in the caller's thread. Handing a call to a thread costs
    more than the call itself (a wake-up and two GIL hand-offs per request)."""

    pending = 0

    def __init__(self, store: Any) -> None:
        self._store = store

    def submit(self, fn_name: str, *args: Any, **kw: Any) -> bool:
        perform(self._store, (fn_name, args, kw))
        return True

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = None) -> bool:
        return True


def writer_for(store: Any) -> BackgroundWriter | InlineWriter:
    """The writer a store wants: inline for the in-process memory store, else a thread."""
    if getattr(store, "kind", None) == "memory":
        return InlineWriter(store)
    return BackgroundWriter(store)
