"""Live reload: all or nothing, the old configuration keeps serving on any error.

``Reloader.reload()`` loads the file again; a valid result is swapped into the
gateway (health, latency and unchanged routes' state carry over), an invalid
one is logged with the reason and changes nothing. ``poll()`` does the same
when the modification time or size of the file, or of a file it includes, changed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from humpyard.config.load import load_config
from humpyard.config.spec import Config
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


class Reloader:
    """Reloads one file into ``apply`` (usually ``Gateway.swap_config``)."""

    def __init__(self, path: str, current: Callable[[], Config], apply: Callable[[Config], None],
                 env: Mapping[str, str] | None = None):
        self.path = path
        self.current = current
        self.apply = apply
        self.env = env
        self._stamp = self._stat()

    def _stat(self) -> tuple[tuple[float, int] | None, ...]:
        stamps: list[tuple[float, int] | None] = []
        for p in (self.path, *self.current().includes):
            try:
                st = os.stat(p)
            except OSError:
                stamps.append(None)
                continue
            stamps.append((st.st_mtime, st.st_size))
        return tuple(stamps)

    def reload(self) -> bool:
        """Load and apply the file; False (and a log line) if it is invalid."""
        self._stamp = self._stat()
        try:
            new = load_config(self.path, self.env)
        except ConfigError as e:
            log.error("reload rejected; the previous configuration keeps serving: %s", e)
            return False
        old = self.current()
        for line in pool_changes(old, new):
            log.warning("pool membership changed %s", line)
        self.apply(new)
        log.info("configuration reloaded source=%s digest=%s", new.source, new.digest)
        return True

    def poll(self) -> bool | None:
        """Reload if the file changed since the last look; None when unchanged."""
        stamp = self._stat()
        if stamp[0] is None or stamp == self._stamp:
            return None
        return self.reload()
