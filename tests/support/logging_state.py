"""Keep the ``humpyard`` logger's state from leaking out of a test that builds a Lambda instance.

A Lambda instance configures the ``humpyard`` logger for Powertools (a JSON
handler bound to the stdout of the moment, no propagation). Left in place,
later tests would write their log lines to a closed capture stream and
``caplog``/``capsys`` would stop seeing ``humpyard.*`` records.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def isolated_humpyard_logging() -> Iterator[None]:
    """Restore the ``humpyard`` logger (handlers, level, propagation) and root filters."""
    pkg = logging.getLogger("humpyard")
    handlers, propagate, level = list(pkg.handlers), pkg.propagate, pkg.level
    attrs = dict(pkg.__dict__)
    root_filters = {h: list(h.filters) for h in logging.root.handlers}
    try:
        yield
    finally:
        for h in pkg.handlers[:]:
            if h not in handlers:
                pkg.removeHandler(h)
        pkg.propagate, pkg.level = propagate, level
        for name in set(pkg.__dict__) - set(attrs):
            delattr(pkg, name)
        for h, filters in root_filters.items():
            h.filters[:] = filters
        asyncio.set_event_loop(None)
