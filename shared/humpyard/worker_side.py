"""A worker's side of ``serve --workers N``: what it runs beside serving.

``serving.serve`` starts these for a worker (``workers.py`` is the parent's
side): the store it shares with the others (``shared_store``), its metrics
snapshot written every ``SNAPSHOT_SECS`` off the loop (``snapshot_metrics``), a
byte to its parent every ``BEAT_SECS`` from the event loop (``beat``: the parent
replaces a worker silent for ``[server] worker_timeout_secs``), and a graceful
stop once the parent is gone (``stop_when_orphaned``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from humpyard.logsink import Sampled

log = logging.getLogger("humpyard")

BEAT_SECS = 1.0
"""How often a worker tells its parent its event loop runs."""


def shared_store(cfg: Any, private_file: str | None) -> Any:
    """The state a worker shares with the others: the run's own file when the
    configuration names no ledger (``private_file``), else the ledger's file."""
    from humpyard.clock import SystemClock
    from humpyard.store import open_store
    if private_file is not None:  # no ledger configured: the run's own file, capped
        from humpyard.store.sqlite import SharedSQLiteStore
        return SharedSQLiteStore(private_file, SystemClock(), ledger=False)
    return open_store(cfg.ledger.path if cfg.ledger else None, SystemClock(), shared=True)


UNWRITTEN_LOG_SECS = 60.0
"""A metrics snapshot that cannot be written is said at most this often."""


async def snapshot_metrics(shared: Any) -> None:
    """Write a worker's metrics snapshot every ``SNAPSHOT_SECS``, off the loop; one
    that cannot be written (a full disk) is said at most once a minute."""
    from humpyard.metrics.sharing import SNAPSHOT_SECS
    said = Sampled(time.monotonic, UNWRITTEN_LOG_SECS)
    while True:
        await asyncio.sleep(SNAPSHOT_SECS)
        await asyncio.to_thread(write_snapshot, shared, said)


def write_snapshot(shared: Any, said: Sampled | None = None) -> None:
    """Write ``shared``'s snapshot; a failure is logged (when ``said`` is due, if given)."""
    try:
        shared.write()
    except OSError as e:  # the run's directory gone (the parent removed it), a full disk
        if n := (said.due() if said is not None else 1):
            log.warning("could not write the metrics snapshot (%d time(s) since the last "
                        "line): %s", n, e)


async def stop_when_orphaned(parent: int, stop: asyncio.Event) -> None:
    """A worker stops (gracefully) once the process that started it is gone."""
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    log.warning("the parent process is gone; this worker stops")
    stop.set()


async def beat(fd: int) -> None:
    """A worker tells its parent, from its event loop, that the loop runs: a byte on
    the pipe ``fd`` every ``BEAT_SECS`` (``workers.py`` replaces a worker silent for
    ``[server] worker_timeout_secs``). The write never waits: a full pipe (the
    parent not reading) or a closed one (the parent gone) is let be."""
    os.set_blocking(fd, False)
    while True:
        try:
            os.write(fd, b".")
        except (BlockingIOError, BrokenPipeError):
            pass
        await asyncio.sleep(BEAT_SECS)
