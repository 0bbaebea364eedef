"""The ``LedgerStore`` half of ``SQLiteStore``: decisions, usage, spend, stats, purge."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from humpyard.errors import ConflictError
from humpyard.store import aggregates as agg
from humpyard.store import decisions as dec
from humpyard.store.base import LedgerBatch
from humpyard.store.rows import check_usd
from humpyard.store.sqlite_base import SQLiteBase

_DECISION_HEAD = """INSERT INTO decisions (request_id, ts, route, rule, outcome, key_id,
    status, target, provider, prompt_tokens, latency_ms, cost_usd, body) VALUES """
_DECISION_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_DECISION = _DECISION_HEAD + _DECISION_ROW

_USAGE_HEAD = """INSERT OR REPLACE INTO usage
    (request_id, kind, input_tokens, output_tokens, cost_usd, ts, cache_read_tokens,
     cache_write_tokens) VALUES """
_USAGE_ROW = "(?, 'answer', ?, ?, ?, ?, ?, ?)"
_INSERT_USAGE = _USAGE_HEAD + _USAGE_ROW

# Rows per multi-row INSERT when a batch is written: 64 x 13 parameters stays
# under SQLite's oldest default limit of 999. See insert_rows.
ROWS_PER_INSERT = 64

_UPSERT_BUCKET = """INSERT INTO stats_buckets
    (dim, hour, gkey, requests, failures, cost_usd, input_tokens, output_tokens,
     cache_read_tokens, cache_write_tokens)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (dim, hour, gkey) DO UPDATE SET
    requests = requests + excluded.requests, failures = failures + excluded.failures,
    cost_usd = cost_usd + excluded.cost_usd,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens"""

_UPSERT_LATENCY = """INSERT INTO stats_latency (dim, hour, gkey, bucket, count)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (dim, hour, gkey, bucket) DO UPDATE SET count = count + excluded.count"""

_ADD_SPEND = """INSERT INTO spend (key_id, period, usd) VALUES (?, ?, ?)
    ON CONFLICT (key_id, period) DO UPDATE SET usd = usd + excluded.usd"""

# One statement for the whole batch, so a batch without repeats costs one step.
_RECORDED = """SELECT request_id FROM decisions
    WHERE request_id IN (SELECT value FROM json_each(?))"""


def insert_rows(conn: sqlite3.Connection, head: str, row: str,
                params: list[tuple[Any, ...]]) -> None:
    """Insert ``params`` with multi-row ``INSERT ... VALUES (...), (...)`` statements,
    ``ROWS_PER_INSERT`` rows each.

    The same rows as ``executemany(head + row, params)``, in far fewer SQLite
    steps: the sqlite3 module lets go of the GIL around every step, and on a
    busy gateway the event loop holds it, so each step of ``executemany``
    (one per row) waits to get it back; the writer fell behind at ~4,000
    decisions/s (docs/decisions/0006-ledger-overload.md). Statement texts
    repeat (full chunks, and at most one remainder size per batch), so
    sqlite3's statement cache keeps them compiled.
    """
    n = ROWS_PER_INSERT
    for start in range(0, len(params), n):
        part = params[start:start + n]
        conn.execute(head + ",".join([row] * len(part)),
                     [value for values in part for value in values])


def write_stats(conn: sqlite3.Connection, row: dec.DecisionRow) -> None:
    """Add one decision to its hourly buckets (inside the caller's transaction)."""
    write_bucket_totals(conn, agg.bucket_totals((row,)))


def write_bucket_totals(conn: sqlite3.Connection,
                        totals: dict[tuple[str, int, str], agg.Aggregate]) -> None:
    """Add summed shares to their hourly buckets (inside the caller's transaction)."""
    shares = totals.items()
    conn.executemany(_UPSERT_BUCKET, [
        (dim, hour, gkey, a.requests, a.failures, a.cost_usd, a.input_tokens, a.output_tokens,
         a.cache_read_tokens, a.cache_write_tokens)
        for (dim, hour, gkey), a in shares])
    conn.executemany(_UPSERT_LATENCY, [
        (dim, hour, gkey, bucket, n)
        for (dim, hour, gkey), a in shares for bucket, n in a.hist.items()])


def _usage_params(row: dec.DecisionRow) -> tuple[Any, ...]:
    return (row.request_id, row.input_tokens, row.output_tokens, row.cost_usd, row.ts,
            row.cache_read_tokens, row.cache_write_tokens)


def _decision_params(row: dec.DecisionRow) -> tuple[Any, ...]:
    return (row.request_id, row.ts, row.route, row.rule, row.outcome, row.key_id, row.status,
            row.target, row.provider, row.prompt_tokens, row.latency_ms, row.cost_usd, row.body)


class SQLiteLedger(SQLiteBase):
    """Decisions with their usage rows and stats, written in one transaction."""

    def write_batch(self, batch: LedgerBatch) -> None:
        rows = dec.batch_rows(batch.decisions)
        spend = [(key_id, period, check_usd(usd)) for (key_id, period), usd in
                 batch.spend.items()]
        if not rows and not spend:
            return
        with self._tx() as conn:
            if rows:
                ids = json.dumps([r.request_id for r in rows])
                recorded = {rid for (rid,) in conn.execute(_RECORDED, (ids,))}
                if recorded:
                    rows = [r for r in rows if r.request_id not in recorded]
                insert_rows(conn, _DECISION_HEAD, _DECISION_ROW,
                            [_decision_params(r) for r in rows])
                insert_rows(conn, _USAGE_HEAD, _USAGE_ROW,
                            [_usage_params(r) for r in rows if r.has_usage])
                write_bucket_totals(conn, agg.bucket_totals(rows))
            if spend:
                conn.executemany(_ADD_SPEND, spend)

    def append_decision(self, decision: dict[str, Any]) -> None:
        row = dec.decision_row(decision)
        with self._tx() as conn:
            try:
                conn.execute(_INSERT_DECISION, _decision_params(row))
            except sqlite3.IntegrityError as exc:
                raise ConflictError(f"decision {row.request_id} is already recorded") from exc
            if row.has_usage:
                conn.execute(_INSERT_USAGE, _usage_params(row))
            write_stats(conn, row)

    def list_decisions(
        self, *, route: str | None = None, rule: str | None = None,
        outcome: str | None = None, key_id: str | None = None,
        since: float | None = None, limit: int = 50, cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        limit = dec.page_limit(limit)
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("route", route), ("rule", rule), ("outcome", outcome),
                              ("key_id", key_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("ts >= ?")
            params.append(since)
        if cursor:
            where.append("(ts, request_id) < (?, ?)")
            params.extend(dec.decode_cursor(cursor))
        sql = ("SELECT ts, request_id, body FROM decisions"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY ts DESC, request_id DESC LIMIT ?")
        with self._read() as conn:
            rows = conn.execute(sql, (*params, limit + 1)).fetchall()
        page = rows[:limit]
        more = len(rows) > limit
        return ([json.loads(body) for _, _, body in page],
                dec.encode_cursor(page[-1][0], page[-1][1]) if more else None)

    def get_decision(self, request_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            found = conn.execute("SELECT body FROM decisions WHERE request_id = ?",
                                 (request_id,)).fetchone()
        return None if found is None else json.loads(found[0])

    def add_spend(self, key_id: str, period: str, usd: float) -> float:
        usd = check_usd(usd)
        with self._tx() as conn:
            return float(conn.execute(_ADD_SPEND + " RETURNING usd",
                                      (key_id, period, usd)).fetchone()[0])

    def get_spend(self, key_id: str, period: str) -> float:
        return self.spend_for({key_id: period})[key_id]

    def spend_for(self, period_by_key: dict[str, str]) -> dict[str, float]:
        out: dict[str, float] = {}
        with self._read() as conn:
            for key_id, period in period_by_key.items():
                found = conn.execute("SELECT usd FROM spend WHERE key_id = ? AND period = ?",
                                     (key_id, period)).fetchone()
                out[key_id] = float(found[0]) if found else 0.0
        return out

    def stats(self, group_by: str, since: float, until: float, *, key_id: str | None = None,
              series: str | None = None) -> list[dict[str, Any]]:
        query = agg.StatsQuery(group_by, key_id, series)
        window = (query.dim, agg.hour_of(since), until)
        by_hour = ", hour" if query.step else ""
        with self._read() as conn:
            for gkey, hour, req, fail, cost, tin, tout, read, wrote in conn.execute(
                    f"""SELECT gkey, {'hour' if query.step else '0'}, SUM(requests),
                       SUM(failures), SUM(cost_usd), SUM(input_tokens), SUM(output_tokens),
                       SUM(cache_read_tokens), SUM(cache_write_tokens) FROM stats_buckets
                       WHERE dim = ? AND hour >= ? AND hour < ? GROUP BY gkey{by_hour}""",
                    window):
                query.add(gkey, hour, agg.Aggregate(
                    requests=req, failures=fail, cost_usd=cost, input_tokens=tin,
                    output_tokens=tout, cache_read_tokens=read, cache_write_tokens=wrote))
            for gkey, bucket, count in conn.execute(
                    """SELECT gkey, bucket, SUM(count) FROM stats_latency
                       WHERE dim = ? AND hour >= ? AND hour < ? GROUP BY gkey, bucket""",
                    window):
                query.add_hist(gkey, bucket, count)
        return query.rows()

    def purge(self, before: float) -> int:
        with self._tx() as conn:
            deleted = conn.execute("DELETE FROM decisions WHERE ts < ?", (before,)).rowcount
            conn.execute("DELETE FROM usage WHERE ts < ?", (before,))
            conn.execute("DELETE FROM stats_buckets WHERE hour + ? <= ?", (agg.HOUR, before))
            conn.execute("DELETE FROM stats_latency WHERE hour + ? <= ?", (agg.HOUR, before))
            conn.execute("DELETE FROM quota_history WHERE ts < ?", (before,))
            conn.execute("DELETE FROM override_audit WHERE ts < ?", (before,))
            conn.execute("DELETE FROM overrides WHERE expires_at < ?", (before,))
        return deleted
