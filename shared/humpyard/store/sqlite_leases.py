"""``SQLiteStore``'s ``LeaseStore`` half: budget leases and per-key limit counters in the file.

Every step is one ``BEGIN IMMEDIATE`` transaction, so two ``humpyard serve``
processes on one ledger file see each other's leases and counters at once
and never both take the last of a budget or a limit: SQLite's write lock
serialises them (a local file: a per-request transaction is cheap, so the
limits are exact across processes). The tables are created on first use
(``CREATE TABLE IF NOT EXISTS``), not by a numbered migration: they hold
only live bookkeeping (a minute's counters, in-flight slots, leases of the
current period), nothing a migration would need to carry forward.

- ``budget_leases (key_id, period, instance, held, expires_at)``: the USD each
  instance holds of a key's budget; rows past ``expires_at`` do not count
  and are deleted by the next lease of the key.
- ``limit_windows (key_id, win, requests, tokens)``: the current minute of
  each key (older minutes are deleted as a new one starts).
- ``limit_slots (key_id, instance, in_flight, expires_at)``: requests in
  flight per instance; a dead instance's row stops counting at its expiry.
"""

from __future__ import annotations

import sqlite3

from humpyard.store.memory_leases import refusal
from humpyard.store.rows import check_usd
from humpyard.store.sharing import LeaseAnswer, LimitCount
from humpyard.store.sqlite_base import SQLiteBase

_TABLES = (
    """CREATE TABLE IF NOT EXISTS budget_leases (
        key_id TEXT NOT NULL, period TEXT NOT NULL, instance TEXT NOT NULL,
        held REAL NOT NULL, expires_at REAL NOT NULL,
        PRIMARY KEY (key_id, period, instance)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS limit_windows (
        key_id TEXT NOT NULL, win REAL NOT NULL, requests INTEGER NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key_id, win)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS limit_slots (
        key_id TEXT NOT NULL, instance TEXT NOT NULL, in_flight INTEGER NOT NULL,
        expires_at REAL NOT NULL, PRIMARY KEY (key_id, instance)) WITHOUT ROWID""",
)

_ADD_SPEND = """INSERT INTO spend (key_id, period, usd) VALUES (?, ?, ?)
    ON CONFLICT (key_id, period) DO UPDATE SET usd = usd + excluded.usd"""


class SQLiteLeases(SQLiteBase):
    """Leases, minute counters and in-flight slots, each change one transaction."""

    _lease_tables_made = False

    def _ensure(self, conn: sqlite3.Connection) -> None:
        if not self._lease_tables_made:
            for sql in _TABLES:
                conn.execute(sql)
            self._lease_tables_made = True

    def lease_budget(self, key_id: str, period: str, instance: str, *, limit: float,
                     spent: float, held: float, want: float, now: float,
                     expires_at: float, keep: float = 0.0) -> LeaseAnswer:
        spent = check_usd(spent)
        with self._tx() as conn:
            self._ensure(conn)
            conn.execute("DELETE FROM budget_leases WHERE key_id = ? AND period = ? "
                         "AND expires_at <= ?", (key_id, period, now))
            if spent:
                conn.execute(_ADD_SPEND, (key_id, period, spent))
            row = conn.execute("SELECT usd FROM spend WHERE key_id = ? AND period = ?",
                               (key_id, period)).fetchone()
            spend = float(row[0]) if row else 0.0
            others, n_others = conn.execute(
                "SELECT COALESCE(SUM(held), 0), COUNT(*) FROM budget_leases "
                "WHERE key_id = ? AND period = ? AND instance != ?",
                (key_id, period, instance)).fetchone()
            row = conn.execute("SELECT held FROM budget_leases WHERE key_id = ? AND period = ? "
                               "AND instance = ?", (key_id, period, instance)).fetchone()
            # never more than the file holds for it: an expired lease is not revived
            held = max(0.0, min(held, float(row[0]) if row else 0.0))
            granted = False
            if want > 0 and spend + float(others) + held + want + keep <= limit + 1e-12:
                held += want
                granted = True
            if held > 0:
                conn.execute("INSERT OR REPLACE INTO budget_leases (key_id, period, instance, "
                             "held, expires_at) VALUES (?, ?, ?, ?, ?)",
                             (key_id, period, instance, held, expires_at))
            else:
                conn.execute("DELETE FROM budget_leases WHERE key_id = ? AND period = ? "
                             "AND instance = ?", (key_id, period, instance))
        return LeaseAnswer(granted=granted, held=held, committed=spend + float(others) + held,
                           holders=int(n_others) + (1 if held > 0 else 0))

    def take_limits(self, key_id: str, instance: str, *, window: float, rpm: int | None,
                    tpm: int | None, parallel: int | None, tokens: int, now: float,
                    expires_at: float) -> LimitCount:
        with self._tx() as conn:
            self._ensure(conn)
            conn.execute("DELETE FROM limit_windows WHERE key_id = ? AND win < ?",
                         (key_id, window))
            row = conn.execute("SELECT requests, tokens FROM limit_windows "
                               "WHERE key_id = ? AND win = ?", (key_id, window)).fetchone()
            requests, used = (int(row[0]), int(row[1])) if row else (0, 0)
            busy = int(conn.execute("SELECT COALESCE(SUM(in_flight), 0) FROM limit_slots "
                                    "WHERE key_id = ? AND expires_at > ?",
                                    (key_id, now)).fetchone()[0])
            refused = refusal(requests, used, busy, rpm, tpm, parallel, tokens)
            if refused is not None:
                return LimitCount(refused, requests, used, busy)
            requests += 1
            if tpm is not None:
                used += tokens
            conn.execute("INSERT OR REPLACE INTO limit_windows (key_id, win, requests, "
                         "tokens) VALUES (?, ?, ?, ?)", (key_id, window, requests, used))
            if parallel is not None:
                conn.execute("DELETE FROM limit_slots WHERE key_id = ? AND expires_at <= ?",
                             (key_id, now))
                conn.execute("INSERT INTO limit_slots (key_id, instance, in_flight, expires_at) "
                             "VALUES (?, ?, 1, ?) ON CONFLICT (key_id, instance) DO UPDATE SET "
                             "in_flight = in_flight + 1, expires_at = excluded.expires_at",
                             (key_id, instance, expires_at))
                busy += 1
        return LimitCount(None, requests, used, busy)

    def release_limits(self, key_id: str, instance: str, *, window: float, tokens: int,
                       parallel: bool, now: float, expires_at: float) -> None:
        with self._tx() as conn:
            self._ensure(conn)
            if tokens:
                conn.execute("UPDATE limit_windows SET tokens = MAX(0, tokens + ?) "
                             "WHERE key_id = ? AND win = ?", (tokens, key_id, window))
            if parallel:
                conn.execute("UPDATE limit_slots SET in_flight = in_flight - 1, expires_at = ? "
                             "WHERE key_id = ? AND instance = ?", (expires_at, key_id, instance))
                conn.execute("DELETE FROM limit_slots WHERE key_id = ? AND instance = ? "
                             "AND in_flight <= 0", (key_id, instance))

    def limit_counts(self, key_id: str, *, window: float, now: float) -> LimitCount:
        with self._tx() as conn:  # the tables may not exist yet: made under the write lock
            self._ensure(conn)
            row = conn.execute("SELECT requests, tokens FROM limit_windows "
                               "WHERE key_id = ? AND win = ?", (key_id, window)).fetchone()
            busy = int(conn.execute("SELECT COALESCE(SUM(in_flight), 0) FROM limit_slots "
                                    "WHERE key_id = ? AND expires_at > ?",
                                    (key_id, now)).fetchone()[0])
        requests, used = (int(row[0]), int(row[1])) if row else (0, 0)
        return LimitCount(None, requests, used, busy)

    def renew_slots(self, instance: str, expires_at: float) -> None:
        with self._tx() as conn:
            self._ensure(conn)
            conn.execute("UPDATE limit_slots SET expires_at = ? WHERE instance = ?",
                         (expires_at, instance))

    def release_instance(self, instance: str) -> tuple[int, int]:
        """Give back everything a dead ``instance`` holds (``serve --workers``' parent,
        when a worker dies without its shutdown): its budget leases and in-flight slots
        stop counting now instead of at their expiry. The number of each deleted."""
        with self._tx() as conn:
            self._ensure(conn)
            leases = conn.execute("DELETE FROM budget_leases WHERE instance = ?",
                                  (instance,)).rowcount
            slots = conn.execute("DELETE FROM limit_slots WHERE instance = ?",
                                 (instance,)).rowcount
        return leases, slots
