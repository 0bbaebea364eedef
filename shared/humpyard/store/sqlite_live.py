"""The ``LiveStateStore`` half of ``SharedSQLiteStore``: breakers and latency in the file.

``humpyard serve --workers N`` runs N processes on one SQLite file; what
they must agree on (a breaker's state and its probe lease, latency figures)
is kept in two tables of that file, with the same contract as the DynamoDB
store (``store/dynamodb_live.py``):

- ``live_breakers``: one row per endpoint, its state as JSON and its
  version. ``put_breaker`` is a compare-and-set on the version inside one
  ``BEGIN IMMEDIATE`` transaction (the file's write lock), so of several
  processes asking for the half-open probe at once exactly one write
  succeeds; a loser gets the stored state back.
- ``live_latency``: per target and time bucket, a count and a total (an
  ``UPSERT`` that adds, like DynamoDB's ``ADD``).

``read_shared`` (the ``SharedStateReader`` contract) brings back breakers,
spend, the latency buckets asked for and the overrides in one read
transaction, so ``SharedState``, ``SharedHealth`` and ``SharedLatency``
serve the file exactly as they serve DynamoDB. The tables are created when
the store opens (``CREATE TABLE IF NOT EXISTS``: no schema version of their
own, they hold nothing that outlives a run) and ``reset_live`` empties
them: the parent of the workers calls it once before starting them, so a
restart starts every endpoint healthy, as a single process does.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.store.live import check_breaker_version
from humpyard.store.rows import to_json
from humpyard.store.sharing import SharedRead, SharedRequest
from humpyard.store.sqlite_base import SQLiteBase
from humpyard.store.sqlite_state import _OVERRIDE_COLUMNS, _override

LIVE_TABLES = (
    """CREATE TABLE IF NOT EXISTS live_breakers (
        endpoint TEXT PRIMARY KEY, body TEXT NOT NULL, version INTEGER NOT NULL)
        WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS live_latency (
        target TEXT NOT NULL, bucket INTEGER NOT NULL, count INTEGER NOT NULL,
        total_ms REAL NOT NULL, PRIMARY KEY (target, bucket)) WITHOUT ROWID""",
)

_ADD_LATENCY = """INSERT INTO live_latency (target, bucket, count, total_ms) VALUES (?, ?, ?, ?)
    ON CONFLICT (target, bucket) DO UPDATE SET
    count = count + excluded.count, total_ms = total_ms + excluded.total_ms"""


class SQLiteLive(SQLiteBase):
    """Breakers and latency buckets every process on the file shares."""

    def _create_live(self) -> None:
        with self._tx() as conn:
            for sql in LIVE_TABLES:
                conn.execute(sql)

    def reset_live(self) -> None:
        """Forget every breaker and latency bucket (a fresh start of all the workers)."""
        with self._tx() as conn:
            conn.execute("DELETE FROM live_breakers")
            conn.execute("DELETE FROM live_latency")

    def get_breakers(self) -> dict[str, dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute("SELECT endpoint, body FROM live_breakers").fetchall()
        return {key: json.loads(body) for key, body in rows}

    def get_breaker(self, key: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute("SELECT body FROM live_breakers WHERE endpoint = ?",
                               (key,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put_breaker(
        self, key: str, state: dict[str, Any], expected_version: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        version = check_breaker_version(state, expected_version)
        body = to_json({**state, "version": version})
        with self._tx() as conn:
            row = conn.execute("SELECT body, version FROM live_breakers WHERE endpoint = ?",
                               (key,)).fetchone()
            stored = None if row is None else int(row[1])
            if stored != expected_version:
                return False, None if row is None else dict(json.loads(row[0]))
            conn.execute("INSERT INTO live_breakers (endpoint, body, version) VALUES (?, ?, ?) "
                         "ON CONFLICT (endpoint) DO UPDATE SET body = excluded.body, "
                         "version = excluded.version", (key, body, version))
        return True, dict(json.loads(body))

    def add_latency(self, samples: dict[str, tuple[int, float]], bucket: int) -> None:
        rows = [(t, int(bucket), int(c), float(ms)) for t, (c, ms) in sorted(samples.items())]
        if rows:
            with self._tx() as conn:
                conn.executemany(_ADD_LATENCY, rows)

    def get_latency(self, since_bucket: int) -> dict[str, list[tuple[int, int, float]]]:
        with self._read() as conn:
            rows = conn.execute("SELECT target, bucket, count, total_ms FROM live_latency "
                                "WHERE bucket >= ? ORDER BY target, bucket",
                                (int(since_bucket),)).fetchall()
        out: dict[str, list[tuple[int, int, float]]] = {}
        for target, bucket, count, total in rows:
            out.setdefault(target, []).append((int(bucket), int(count), float(total)))
        return out

    def purge_latency(self, before_bucket: int) -> int:
        with self._tx() as conn:
            return int(conn.execute("DELETE FROM live_latency WHERE bucket < ?",
                                    (int(before_bucket),)).rowcount)

    def read_shared(self, request: SharedRequest) -> SharedRead:
        """Breakers, spend, latency buckets and every override, in one read transaction
        (the overrides are a few rows: read each time, ``overrides_version`` is 0)."""
        buckets = tuple(int(b) for b in request.latency_buckets)
        latency: dict[str, dict[int, tuple[int, float]]] = {}
        with self._read() as conn:
            breakers = {key: json.loads(body) for key, body in conn.execute(
                "SELECT endpoint, body FROM live_breakers")}
            spend = {}
            for key_id, period in request.spend.items():
                row = conn.execute("SELECT usd FROM spend WHERE key_id = ? AND period = ?",
                                   (key_id, period)).fetchone()
                spend[key_id] = float(row[0]) if row else 0.0
            if buckets:
                for target, bucket, count, total in conn.execute(
                        "SELECT target, bucket, count, total_ms FROM live_latency "
                        "WHERE bucket BETWEEN ? AND ?", (min(buckets), max(buckets))):
                    if bucket in buckets:
                        latency.setdefault(target, {})[int(bucket)] = (int(count), float(total))
            overrides = [_override(r) for r in conn.execute(
                f"SELECT {_OVERRIDE_COLUMNS} FROM overrides ORDER BY created_at, rowid")]
        return SharedRead(breakers=breakers, spend=spend, latency=latency,
                          overrides_version=0, overrides=overrides)
