"""What the workers of ``serve --workers N`` share on the disk, seen from their parent.

``check_shared_config`` names the store they share (a ``[ledger] path`` SQLite
file, DynamoDB, or none: ``RunDir``'s private state file for the run);
``RunDir`` is the run's own directory (each worker's metrics snapshot, and
that state file); ``reset_live_state`` empties a SQLite file's breakers and
latency at the start and end of a run; ``give_back`` frees the budget leases,
limit slots and probe leases a dead worker held in the file (on DynamoDB,
``give_back_probes`` its probe leases). The supervising itself is
``workers.py``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile

from humpyard.config.spec import Config
from humpyard.errors import ConfigError, HumpyardError
from humpyard.health.breaker import BreakerState, release_owned_probe
from humpyard.store.base import LiveStateStore

log = logging.getLogger("humpyard.workers")


def check_shared_config(cfg: Config) -> str:
    """The store the workers share: ``sqlite`` (the ``[ledger] path`` file),
    ``dynamodb`` or ``memory`` (none configured: ``RunDir``'s state file). ``ConfigError``
    when it names a SQLite database no other process can open."""
    from humpyard.clock import SystemClock
    from humpyard.fleet import backend_of, check_backend, open_configured_store
    from humpyard.store import file_on_disk
    backend = backend_of(cfg)
    if backend == "dynamodb":
        check_backend(cfg)
        open_configured_store(cfg, SystemClock()).close()  # credentials, region, tables
        return backend
    if backend == "memory":
        return backend
    path = cfg.ledger.path if cfg.ledger is not None else None
    if not file_on_disk(path):
        raise ConfigError(f"ledger.path: serve --workers N (N > 1) needs a file on the disk "
                          f"that every worker opens, not {path!r}")
    return backend


class RunDir:
    """The run's own directory, which only this user may enter (``mkdtemp``): each
    worker's metrics snapshot (``metrics/sharing.py``) and, with ``state``, the workers'
    state file when the configuration names no ledger: ``state.db``
    (``SharedSQLiteStore`` with ``ledger=False``: shared breakers, probe leases, latency,
    spend and limits; overrides refused and decisions capped, as one process without a
    ledger). ``close`` removes it; a parent killed with SIGKILL leaves it behind."""

    def __init__(self, *, state: bool) -> None:
        self.dir = tempfile.mkdtemp(prefix="humpyard-workers-")  # mode 0700
        self.state: str | None = None
        if state:
            from humpyard.clock import SystemClock
            from humpyard.store.sqlite import SharedSQLiteStore
            self.state = os.path.join(self.dir, "state.db")
            SharedSQLiteStore(self.state, SystemClock(), ledger=False).close()  # made, migrated

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def reset_live_state(cfg: Config) -> None:
    """Open the shared SQLite file once (creating and migrating it) and empty its live
    state."""
    from humpyard.clock import SystemClock
    from humpyard.store.sqlite import SharedSQLiteStore
    assert cfg.ledger is not None and cfg.ledger.path is not None
    store = SharedSQLiteStore(os.path.expanduser(cfg.ledger.path), SystemClock())
    try:
        store.reset_live()
    finally:
        store.close()


def reset_quietly(cfg: Config) -> None:
    try:
        reset_live_state(cfg)
    except (HumpyardError, OSError) as e:  # the file gone or locked: it is reset at start
        log.warning("could not empty the live state at exit: %s", e)


def give_back(path: str, instance: str) -> None:
    """What the dead worker ``instance`` held in the SQLite file at ``path``: its budget
    leases and limit slots stop counting now, and a half-open endpoint it was probing is
    probed again by the next request of any worker (``release_probes``), instead of by
    none until the lease lapses (``[health]``'s probe lease: the longest timeout plus
    60 s). Logged; a failure leaves them to expire."""
    from humpyard.clock import SystemClock
    from humpyard.store.sqlite import SharedSQLiteStore
    try:
        store = SharedSQLiteStore(path, SystemClock())
        try:
            leases, slots = store.release_instance(instance)
            probes = release_probes(store, instance)
        finally:
            store.close()
    except (HumpyardError, OSError, sqlite3.Error) as e:
        log.warning("could not give back what instance %s held; it counts until its lease "
                    "expires: %s", instance, e)
        return
    if leases or slots or probes:
        log.warning("gave back instance %s's %d budget lease(s), %d limit slot row(s) and "
                    "%d probe lease(s)", instance, leases, slots, probes)


def give_back_probes(cfg: Config, instance: str) -> None:
    """On DynamoDB, the probe leases the dead worker ``instance`` held: the breakers are
    one item any process reads, so the parent ends them as on a SQLite file (its budget
    leases and limit slots are spread over the keys' items: they count until they
    expire). Slow when the tables do not answer: call it off the parent's loop."""
    from humpyard.clock import SystemClock
    from humpyard.fleet import open_configured_store
    try:
        store = open_configured_store(cfg, SystemClock())
        try:
            probes = release_probes(store, instance)
        finally:
            store.close()
    except (HumpyardError, OSError) as e:
        log.warning("could not give back instance %s's probe leases; they last until "
                    "they lapse: %s", instance, e)
        return
    if probes:
        log.warning("gave back instance %s's %d probe lease(s)", instance, probes)


def release_probes(store: LiveStateStore, owner: str) -> int:
    """End every probe lease ``owner`` holds in ``store``'s breakers, each by the
    compare-and-set any transition uses (one a live process changed meanwhile is no
    longer the dead one's: left alone). The number ended."""
    ended = 0
    for key, body in store.get_breakers().items():
        state = BreakerState.from_dict(body)
        freed = release_owned_probe(state, owner)
        if freed is not None:
            ok, _ = store.put_breaker(key, freed.to_dict(), state.version)
            ended += ok
    return ended
