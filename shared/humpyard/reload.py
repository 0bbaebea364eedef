"""Live reload: all or nothing, the old configuration keeps serving on any error.

``Reloader.reload()`` loads the file again; a valid result is swapped into the
gateway (health, latency and unchanged routes' state carry over; the store is
the one opened: a change of store takes a restart, ``config/stores.py``), an
invalid one is logged with the reason and changes nothing. ``poll()`` does the same
when the modification time or size of the file, or of a file it includes, changed
and has held still for one more look (``FileWatch``: never a file caught half
written).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from humpyard.config.load import load_config
from humpyard.config.spec import Config
from humpyard.config.stores import keep_store, store_named
from humpyard.errors import ConfigError

log = logging.getLogger("humpyard.reload")


def pool_changes(old: Config, new: Config) -> list[str]:
    """Lines describing pool routes whose resolved membership differs."""
    out = []
    for name, r in new.routes.items():
        before = old.routes.get(name)
        if r.pool is not None and before is not None and before.targets != r.targets:
            out.append(f"route={name} before={list(before.targets)} after={list(r.targets)}")
    return out


def file_stamps(path: str,
                includes: Sequence[str]) -> tuple[tuple[int, int] | None, ...] | None:
    """The modification time and size of ``path`` and of each file it includes (None
    for an included file that cannot be read): a change of any says the configuration
    may have. None while ``path`` itself cannot be read (being replaced, say)."""
    stamps: list[tuple[int, int] | None] = []
    for i, p in enumerate((path, *includes)):
        try:
            st = os.stat(p)
        except OSError:
            if i == 0:
                return None
            stamps.append(None)
            continue
        stamps.append((st.st_mtime_ns, st.st_size))
    return tuple(stamps)


class FileWatch:
    """Whether a configuration's files changed since they were loaded, and have held
    still since: a change is due once two looks in a row see the same stamps. A file
    written in place is first emptied, then written; a look in between sees a file
    that may well be valid (an empty one is: no targets) and must not load it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.loaded = self.seen = file_stamps(path, ())

    def mark(self, includes: Sequence[str]) -> None:
        """Taken just before loading: what the load reads is at least this new."""
        self.loaded = self.seen = file_stamps(self.path, includes)

    def due(self, includes: Sequence[str]) -> bool:
        stamp = file_stamps(self.path, includes)
        still = stamp == self.seen
        self.seen = stamp
        return stamp is not None and stamp != self.loaded and still


class Watch(Protocol):
    """When a configuration is due for reloading (``FileWatch``; a worker's
    ``published_config.PublishedConfig``)."""

    def mark(self, includes: Sequence[str]) -> None: ...

    def due(self, includes: Sequence[str]) -> bool: ...


class Reloader:
    """Reloads one file into ``apply`` (usually ``Gateway.swap_config``).

    ``load`` and ``watch`` replace reading the file and watching its files (a worker
    of ``serve --workers N`` loads what its parent checked and published:
    ``published_config.PublishedConfig`` is both)."""

    def __init__(self, path: str, current: Callable[[], Config], apply: Callable[[Config], None],
                 env: Mapping[str, str] | None = None, *,
                 load: Callable[[], Config] | None = None, watch: Watch | None = None):
        self.path = path
        self.current = current
        self.apply = apply
        self.env = env
        self._load = load or (lambda: load_config(self.path, self.env))
        self._watch = watch or FileWatch(path)
        self._watch.mark(current().includes)

    def reload(self) -> bool:
        """Load and apply the file; False (and a log line) if it is invalid."""
        self._watch.mark(self.current().includes)
        try:
            new = self._load()
        except ConfigError as e:
            log.error("reload rejected; the previous configuration keeps serving: %s", e)
            return False
        old = self.current()
        new, kept = keep_store(new, store_named(old))
        if kept is not None:
            log.warning("%s", kept)
        for line in pool_changes(old, new):
            log.warning("pool membership changed %s", line)
        self.apply(new)
        log.info("configuration reloaded source=%s digest=%s", new.source, new.digest)
        return True

    def poll(self) -> bool | None:
        """Reload if the watch says a change is due; None when not."""
        if not self._watch.due(self.current().includes):
            return None
        return self.reload()
