"""``drained``: wait until what was queued on a one-thread executor so far has run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def _nothing() -> None:
    """The marker ``drained`` queues behind the work."""


def drained(pool: ThreadPoolExecutor | None, timeout: float | None) -> bool:
    """Whether the work queued on ``pool`` (one thread: in order) before this call ran
    within ``timeout`` seconds. True for no pool, or one shut down (its work ran then)."""
    if pool is None:
        return True
    try:
        done = pool.submit(_nothing)
    except RuntimeError:  # shut down meanwhile
        return True
    try:
        done.result(timeout)
    except TimeoutError:
        return False
    return True
