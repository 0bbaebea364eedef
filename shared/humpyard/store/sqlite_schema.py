"""The SQLite ledger schema as numbered, forward-only migrations.

``schema_version`` holds one row per applied migration. Opening a file
applies every migration above its version, each in its own transaction
(re-checked under the write lock, so two processes opening the same file do
not both apply one). A file from a newer humpyard is refused rather than
guessed at. Never edit a released migration; append a new one.

- v1: decisions, usage, spend, overrides and their audit.
- v2: hourly stats aggregates, backfilled from the decisions already stored.
- v3: quota snapshots and history.
- v4: prompt-cache token counts (reads, writes) on usage rows and stats buckets.
- v5: stats buckets of each key by route, target and provider (the scoped
  dimensions of ``store/aggregates.py``), backfilled from the decisions stored.

The decision and usage columns are a public interface: operators query
them with the sqlite3 shell (docs/operations.md, "Tuning the prompt estimate").
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable

from humpyard.errors import StoreError
from humpyard.store.aggregates import SCOPED, STATS_GROUPS, bucket_totals
from humpyard.store.decisions import DecisionRow, decision_row

logger = logging.getLogger("humpyard.store")

Step = str | Callable[[sqlite3.Connection], None]

V1: tuple[Step, ...] = (
    """CREATE TABLE decisions (
        request_id TEXT PRIMARY KEY, ts REAL NOT NULL, route TEXT, rule TEXT,
        outcome TEXT, key_id TEXT, status INTEGER, target TEXT, provider TEXT,
        prompt_tokens INTEGER, latency_ms REAL, cost_usd REAL, body TEXT NOT NULL)""",
    # Each index ends in request_id so a filtered, newest-first page is an index walk.
    "CREATE INDEX decisions_ts ON decisions (ts, request_id)",
    "CREATE INDEX decisions_rule_ts ON decisions (rule, ts, request_id)",
    "CREATE INDEX decisions_outcome_ts ON decisions (outcome, ts, request_id)",
    "CREATE INDEX decisions_route_ts ON decisions (route, ts, request_id)",
    "CREATE INDEX decisions_key_ts ON decisions (key_id, ts, request_id)",
    """CREATE TABLE usage (
        request_id TEXT NOT NULL, kind TEXT NOT NULL DEFAULT 'answer',
        input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL, ts REAL NOT NULL,
        PRIMARY KEY (request_id, kind))""",
    "CREATE INDEX usage_ts ON usage (ts)",
    """CREATE TABLE spend (
        key_id TEXT NOT NULL, period TEXT NOT NULL, usd REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (key_id, period)) WITHOUT ROWID""",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TABLE overrides (
        id TEXT PRIMARY KEY, kind TEXT NOT NULL, subject TEXT NOT NULL, target TEXT,
        reason TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, expires_at REAL NOT NULL,
        created_by TEXT, expiry_audited INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX overrides_expires ON overrides (expires_at)",
    """CREATE TABLE override_audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, action TEXT NOT NULL,
        override_id TEXT, by_key TEXT, body TEXT NOT NULL)""",
    "CREATE INDEX override_audit_ts ON override_audit (ts)",
)


# The stats columns as v2 made them (later migrations add columns after it runs).
_V2_BUCKET = """INSERT INTO stats_buckets
    (dim, hour, gkey, requests, failures, cost_usd, input_tokens, output_tokens)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (dim, hour, gkey) DO UPDATE SET
    requests = requests + excluded.requests, failures = failures + excluded.failures,
    cost_usd = cost_usd + excluded.cost_usd,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens"""
_V2_LATENCY = """INSERT INTO stats_latency (dim, hour, gkey, bucket, count)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (dim, hour, gkey, bucket) DO UPDATE SET count = count + excluded.count"""


def _stored_rows(conn: sqlite3.Connection) -> list[DecisionRow]:
    skipped = 0
    rows = []
    for (body,) in conn.execute("SELECT body FROM decisions").fetchall():
        try:
            rows.append(decision_row(json.loads(body)))
        except ValueError:
            skipped += 1
    if skipped:
        logger.warning("stats backfill skipped %d unreadable decisions", skipped)
    return rows


def _backfill_stats(conn: sqlite3.Connection) -> None:
    """Fold the decisions a v1 ledger holds into the new aggregates (the dimensions
    v2 knew: v5 backfills the scoped ones)."""
    totals = [(k, a) for k, a in bucket_totals(_stored_rows(conn)).items()
              if k[0] in STATS_GROUPS]
    conn.executemany(_V2_BUCKET, [
        (dim, hour, gkey, a.requests, a.failures, a.cost_usd, a.input_tokens, a.output_tokens)
        for (dim, hour, gkey), a in totals])
    conn.executemany(_V2_LATENCY, [(dim, hour, gkey, bucket, n)
                                   for (dim, hour, gkey), a in totals
                                   for bucket, n in a.hist.items()])


V2: tuple[Step, ...] = (
    """CREATE TABLE stats_buckets (
        dim TEXT NOT NULL, hour INTEGER NOT NULL, gkey TEXT NOT NULL,
        requests INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (dim, hour, gkey)) WITHOUT ROWID""",
    """CREATE TABLE stats_latency (
        dim TEXT NOT NULL, hour INTEGER NOT NULL, gkey TEXT NOT NULL,
        bucket INTEGER NOT NULL, count INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (dim, hour, gkey, bucket)) WITHOUT ROWID""",
    _backfill_stats,
)

V3: tuple[Step, ...] = (
    """CREATE TABLE quota_snapshots (
        provider TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL NOT NULL)""",
    """CREATE TABLE quota_history (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, provider TEXT NOT NULL, win TEXT NOT NULL,
        ts REAL NOT NULL, body TEXT NOT NULL)""",
    "CREATE INDEX quota_history_provider_ts ON quota_history (provider, win, ts)",
    "CREATE INDEX quota_history_ts ON quota_history (ts)",
)

V4: tuple[Step, ...] = (
    "ALTER TABLE usage ADD COLUMN cache_read_tokens INTEGER",
    "ALTER TABLE usage ADD COLUMN cache_write_tokens INTEGER",
    "ALTER TABLE stats_buckets ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE stats_buckets ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0",
)

_V5_BUCKET = """INSERT INTO stats_buckets
    (dim, hour, gkey, requests, failures, cost_usd, input_tokens, output_tokens,
     cache_read_tokens, cache_write_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def _backfill_scoped(conn: sqlite3.Connection) -> None:
    """Each key's requests by route, target and provider, from the decisions stored."""
    scoped = frozenset(SCOPED.values())
    totals = [(k, a) for k, a in bucket_totals(_stored_rows(conn)).items() if k[0] in scoped]
    conn.executemany(_V5_BUCKET, [
        (dim, hour, gkey, a.requests, a.failures, a.cost_usd, a.input_tokens, a.output_tokens,
         a.cache_read_tokens, a.cache_write_tokens) for (dim, hour, gkey), a in totals])
    conn.executemany(_V2_LATENCY, [(dim, hour, gkey, bucket, n)
                                   for (dim, hour, gkey), a in totals
                                   for bucket, n in a.hist.items()])


V5: tuple[Step, ...] = (_backfill_scoped,)

MIGRATIONS: tuple[tuple[int, tuple[Step, ...]], ...] = (
    (1, V1), (2, V2), (3, V3), (4, V4), (5, V5))
LATEST = MIGRATIONS[-1][0]


def current_version(conn: sqlite3.Connection) -> int:
    """The file's schema version; 0 for a new file."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                 "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
               .fetchone()[0])


def migrate(conn: sqlite3.Connection, now: float, target: int = LATEST) -> int:
    """Apply every migration above the file's version up to ``target``; return the version.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Raises
    ``StoreError`` for a file newer than ``LATEST`` or a failed migration
    (which is rolled back whole).
    """
    version = current_version(conn)
    if version > LATEST:
        raise StoreError(f"ledger schema v{version} is newer than this humpyard (v{LATEST})")
    for number, steps in MIGRATIONS:
        if version < number <= target:
            _apply(conn, number, steps, now)
    return current_version(conn)


def _apply(conn: sqlite3.Connection, number: int, steps: tuple[Step, ...], now: float) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if current_version(conn) < number:
            for step in steps:
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                         (number, now))
            logger.info("ledger schema migrated to v%d", number)
        conn.execute("COMMIT")
    except BaseException as exc:
        conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"ledger migration to v{number} failed: {exc}") from exc
        raise
