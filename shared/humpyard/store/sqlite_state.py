"""The ``OverrideStore`` and ``QuotaStore`` halves of ``SQLiteStore``."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from humpyard.errors import ConflictError
from humpyard.planning.types import Override
from humpyard.store.rows import audit_entry, override_as_stored, quota_sample, to_json
from humpyard.store.sqlite_base import SQLiteBase

_OVERRIDE_COLUMNS = "id, kind, subject, target, reason, created_at, expires_at, created_by"

_NEXT_ID = """INSERT INTO counters (name, value) VALUES ('override_id', 1)
    ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value"""


def _override(row: tuple[Any, ...]) -> Override:
    oid, kind, subject, target, reason, created_at, expires_at, created_by = row
    return Override(id=oid, kind=kind, subject=subject, target=target, reason=reason or "",
                    created_at=created_at, expires_at=expires_at, created_by=created_by)


def _write_audit(conn: sqlite3.Connection, entry: dict[str, Any]) -> None:
    conn.execute("INSERT INTO override_audit (ts, action, override_id, by_key, body) "
                 "VALUES (?, ?, ?, ?, ?)",
                 (entry["ts"], entry["action"], entry["override_id"], entry["by"],
                  to_json(entry)))


def _exists(conn: sqlite3.Connection, oid: str) -> bool:
    return conn.execute("SELECT 1 FROM overrides WHERE id = ?", (oid,)).fetchone() is not None


class SQLiteOverrides(SQLiteBase):
    """Overrides and their audit trail; every change and its audit entry commit together."""

    has_ledger = True

    def create_override(self, ov: Override) -> Override:
        with self._tx() as conn:
            if ov.id and _exists(conn, ov.id):
                raise ConflictError(f"override {ov.id} already exists")
            new_id = ov.id
            while not new_id or _exists(conn, new_id):
                new_id = str(conn.execute(_NEXT_ID).fetchone()[0])
            stored = override_as_stored(ov, new_id)
            conn.execute(f"INSERT INTO overrides ({_OVERRIDE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
                         (stored.id, stored.kind, stored.subject, stored.target, stored.reason,
                          stored.created_at, stored.expires_at, stored.created_by))
        return stored

    def list_overrides(self, now: float, *, include_expired: bool = False) -> list[Override]:
        sql = f"SELECT {_OVERRIDE_COLUMNS} FROM overrides"
        params: tuple[Any, ...] = ()
        if not include_expired:
            sql += " WHERE expires_at > ?"
            params = (now,)
        with self._read() as conn:
            rows = conn.execute(sql + " ORDER BY created_at, rowid", params).fetchall()
        return [_override(r) for r in rows]

    def delete_override(self, id: str, *, by: str | None, now: float) -> Override | None:
        with self._tx() as conn:
            row = conn.execute(f"SELECT {_OVERRIDE_COLUMNS} FROM overrides WHERE id = ?",
                               (id,)).fetchone()
            if row is None:
                return None
            found = _override(row)
            conn.execute("DELETE FROM overrides WHERE id = ?", (id,))
            _write_audit(conn, audit_entry("remove", found, by, now))
        return found

    def audit(self, action: str, override: Override, by: str | None, now: float) -> None:
        entry = audit_entry(action, override, by, now)
        with self._tx() as conn:
            _write_audit(conn, entry)

    def list_audit(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute("SELECT body FROM override_audit ORDER BY ts DESC, seq DESC "
                                "LIMIT ?", (max(0, limit),)).fetchall()
        return [json.loads(body) for (body,) in rows]

    def expire_due(self, now: float) -> list[Override]:
        with self._tx() as conn:
            due = [_override(r) for r in conn.execute(
                f"SELECT {_OVERRIDE_COLUMNS} FROM overrides "
                "WHERE expiry_audited = 0 AND expires_at <= ? ORDER BY created_at, rowid",
                (now,)).fetchall()]
            for ov in due:
                conn.execute("UPDATE overrides SET expiry_audited = 1 WHERE id = ?", (ov.id,))
                _write_audit(conn, audit_entry("expire", ov, None, ov.expires_at))
        return due


class SQLiteQuota(SQLiteBase):
    """Quota snapshots (one row per provider) and the sampled history."""

    def put_quota_snapshot(self, provider: str, snapshot: dict[str, Any]) -> None:
        body = to_json(snapshot)
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO quota_snapshots (provider, body, updated_at) "
                         "VALUES (?, ?, ?)", (provider, body, self._clock.now()))

    def get_quota_snapshots(self) -> dict[str, dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute("SELECT provider, body FROM quota_snapshots").fetchall()
        return {provider: json.loads(body) for provider, body in rows}

    def append_quota_history(self, sample: dict[str, Any]) -> None:
        provider, window, ts, body = quota_sample(sample)
        with self._tx() as conn:
            conn.execute("INSERT INTO quota_history (provider, win, ts, body) VALUES (?,?,?,?)",
                         (provider, window, ts, body))

    def list_quota_history(
        self, provider: str | None = None, since: float | None = None, limit: int = 500,
    ) -> list[dict[str, Any]]:
        where: list[str] = []
        params: list[Any] = []
        if provider is not None:
            where.append("provider = ?")
            params.append(provider)
        if since is not None:
            where.append("ts >= ?")
            params.append(since)
        sql = ("SELECT body FROM quota_history"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY ts DESC, seq DESC LIMIT ?")
        with self._read() as conn:
            rows = conn.execute(sql, (*params, max(0, limit))).fetchall()
        return [json.loads(body) for (body,) in rows]

    def last_quota_sample(self, provider: str, window: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute("SELECT body FROM quota_history WHERE provider = ? AND win = ? "
                               "ORDER BY ts DESC, seq DESC LIMIT 1",
                               (provider, window)).fetchone()
        return None if row is None else json.loads(row[0])
