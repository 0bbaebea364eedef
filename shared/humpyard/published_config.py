"""The configuration a ``serve --workers`` parent checked, handed to its workers.

The parent writes the texts it read for its check (the file and those it
includes: ``config.files.ConfigFiles``) into the run's directory
(``publish_config``); each worker loads those, at its start and at each
reload (``PublishedConfig``), never the file on the disk, so no worker runs an
edit the parent did not check (``workers.py``, ADR 0024); and on the store the
run opened, whatever a reloaded file names (``config/stores.py``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from humpyard.config import load_config
from humpyard.config.files import ConfigFiles
from humpyard.config.spec import Config
from humpyard.config.stores import keep_store

log = logging.getLogger("humpyard.workers")

PUBLISHED = "config.json"
"""The configuration the parent checked, in the run's directory (``PublishedConfig``)."""


def publish_config(run_dir: str, files: ConfigFiles, generation: int,
                   store: dict[str, Any]) -> None:
    """Write the texts ``files`` read for a check (the file and those it includes) as
    the configuration every worker loads, replacing the last one at once (rename), with
    the store the run opened (``config.stores.store_named``): a worker keeps it whatever
    the texts name, a restarted one too (a change of store takes a restart)."""
    tmp = os.path.join(run_dir, f".{PUBLISHED}.{generation}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"generation": generation, "texts": files.texts, "store": store}, f)
    os.replace(tmp, os.path.join(run_dir, PUBLISHED))


class PublishedConfig:
    """A worker's view of what its parent published in the run's directory: ``load``
    checks and returns it (``config_path`` names it, and resolves what it includes,
    exactly as the parent did) and remembers its generation; ``due`` says a newer one
    was published since, so a reload the worker missed (a SIGHUP while it was
    starting) is seen and caught up. ``Reloader``'s watch, as ``reload.FileWatch`` is
    for a file."""

    def __init__(self, run_dir: str, config_path: str) -> None:
        self.path = os.path.join(run_dir, PUBLISHED)
        self.config_path = config_path
        self.loaded: int | None = None  # the generation the last load read

    def _read(self) -> dict[str, Any]:
        with open(self.path, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
        return data

    def _generation(self) -> int | None:
        try:
            return int(self._read()["generation"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def mark(self, includes: Sequence[str]) -> None:
        """Nothing: ``load`` notes the generation it read, with the texts."""

    def due(self, includes: Sequence[str]) -> bool:
        generation = self._generation()
        return generation is not None and generation != self.loaded

    def load(self) -> Config:
        """The published configuration, checked here (``ConfigError``), on the run's
        store; the file itself only when nothing was published (the run's directory
        is gone)."""
        try:
            data = self._read()
            texts, store = data["texts"], data["store"]
            self.loaded = int(data["generation"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("the parent's checked configuration is unavailable (%s); "
                        "reading %s", e, self.config_path)
            return load_config(self.config_path)
        config, _ = keep_store(load_config(self.config_path, files=ConfigFiles(texts)),
                               store)  # what differs is said by the parent, once
        return config
