"""Shared pieces of the disk attack tests: a served gateway with a ledger file, in
front of ``humpyard simulate --profile zero`` (an upstream in another process, so
the gateway's event loop is all that is measured), and direct reads of the file."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from tests.durability.process import ServeProcess, SimulatorProcess

KEY = "k-disk-admin"


def write_config(tmp: Path, upstream: str, extra: str = "") -> Path:
    path = tmp / "humpyard.toml"
    path.write_text(f"""
{extra}
[ledger]
path = "{tmp / 'ledger.db'}"
[providers.p]
base_url = "{upstream}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
""")
    return path


@contextmanager
def served(tmp: Path, extra: str = "", env: dict[str, str] | None = None,
           before_start: object = None) -> Iterator[ServeProcess]:
    """``humpyard serve`` with ``[ledger]`` at ``tmp/ledger.db`` and target ``t``."""
    with SimulatorProcess(tmp / "simulator.log") as sim:
        config = write_config(tmp, sim.url, extra)
        if callable(before_start):
            before_start()
        with ServeProcess(config, tmp / "serve.log", env=env, log_level="WARNING") as server:
            yield server


def count(db: Path, where: str = "1") -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM decisions WHERE {where}").fetchone()[0])


def wait_for(predicate: object, timeout: float, what: str) -> None:
    """Poll ``predicate()`` until true; fail naming ``what`` after ``timeout`` seconds."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
