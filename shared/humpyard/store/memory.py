"""``MemoryStore``: the whole ``Store`` contract in dicts behind one lock.

Used when no ``[ledger]`` is configured (``MemoryStore(ledger=False)``:
overrides are refused, and the decision log is capped so a long-running
process does not grow without bound) and in tests (``MemoryStore()``).
Nothing survives the process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from humpyard.errors import ConflictError, StoreError
from humpyard.planning.types import Override
from humpyard.store import aggregates as agg
from humpyard.store import decisions as dec
from humpyard.store.base import LedgerBatch
from humpyard.store.live import LiveState, LiveStateDelegate
from humpyard.store.memory_leases import MemoryLeases
from humpyard.store.rows import (
    audit_entry,
    check_usd,
    override_as_stored,
    quota_sample,
    to_json,
)

NO_LEDGER_MAX_DECISIONS = 10_000


class MemoryStore(MemoryLeases, LiveStateDelegate):
    """An in-process ``Store``; every method is atomic under one lock.

    ``ledger=False`` makes ``has_ledger`` False: ``create_override`` raises
    ``ConflictError`` and only the newest ``max_decisions`` decisions are kept
    (default ``NO_LEDGER_MAX_DECISIONS``; unlimited with a ledger). Evicting a
    decision leaves its stats in place.
    """

    kind = "memory"

    def __init__(self, ledger: bool = True, *, max_decisions: int | None = None) -> None:
        self.has_ledger = ledger
        self._max_decisions = max_decisions if max_decisions is not None else (
            None if ledger else NO_LEDGER_MAX_DECISIONS)
        self._lock = threading.RLock()
        self._closed = False
        self._live = LiveState()
        self._decisions: dict[str, dec.DecisionRow] = {}
        self._usage: dict[str, float] = {}  # request_id -> ts (nothing reads usage back)
        self._stats: dict[tuple[str, int, str], agg.Aggregate] = {}
        self._spend: dict[tuple[str, str], float] = {}
        self._overrides: dict[str, tuple[Override, bool]] = {}  # id -> (override, expiry audited)
        self._next_override = 0
        self._audit: list[dict[str, Any]] = []
        self._snapshots: dict[str, str] = {}
        self._history: list[tuple[str, str, float, str]] = []

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise StoreError("store is closed")
            yield

    def ping(self) -> None:
        """``StoreError`` once closed; nothing else can fail in memory."""
        with self._locked():
            pass

    def close(self) -> None:
        """Refuse further calls; idempotent."""
        with self._lock:
            self._closed = True
        self._live.close()

    # -- ledger -------------------------------------------------------------

    def append_decision(self, decision: dict[str, Any]) -> None:
        row = dec.decision_row(decision)
        with self._locked():
            if row.request_id in self._decisions:
                raise ConflictError(f"decision {row.request_id} is already recorded")
            self._insert(row)

    def write_batch(self, batch: LedgerBatch) -> None:
        rows = dec.batch_rows(batch.decisions)
        spend = [(key, check_usd(usd)) for key, usd in batch.spend.items()]
        with self._locked():
            for row in rows:
                if row.request_id not in self._decisions:
                    self._insert(row)
            for key, usd in spend:
                self._spend[key] = self._spend.get(key, 0.0) + usd

    def _insert(self, row: dec.DecisionRow) -> None:
        """Record a new decision with its usage and stats (under the lock)."""
        self._decisions[row.request_id] = row
        if row.has_usage:
            self._usage[row.request_id] = row.ts
        agg.add_into(self._stats, (row,))
        if self._max_decisions is not None and len(self._decisions) > self._max_decisions:
            oldest = next(iter(self._decisions))
            del self._decisions[oldest]
            self._usage.pop(oldest, None)

    def list_decisions(
        self, *, route: str | None = None, rule: str | None = None,
        outcome: str | None = None, key_id: str | None = None,
        since: float | None = None, limit: int = 50, cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        limit = dec.page_limit(limit)
        after = dec.decode_cursor(cursor) if cursor else None
        wanted = {"route": route, "rule": rule, "outcome": outcome, "key_id": key_id}
        with self._locked():
            rows = [r for r in self._decisions.values()
                    if all(v is None or getattr(r, f) == v for f, v in wanted.items())
                    and (since is None or r.ts >= since)
                    and (after is None or (r.ts, r.request_id) < after)]
            rows.sort(key=lambda r: (r.ts, r.request_id), reverse=True)
            page = rows[:limit]
            bodies = [json.loads(r.body) for r in page]
        more = len(rows) > limit
        return bodies, dec.encode_cursor(page[-1].ts, page[-1].request_id) if more else None

    def get_decision(self, request_id: str) -> dict[str, Any] | None:
        with self._locked():
            found = self._decisions.get(request_id)
            return None if found is None else json.loads(found.body)

    def add_spend(self, key_id: str, period: str, usd: float) -> float:
        usd = check_usd(usd)
        with self._locked():
            total = self._spend.get((key_id, period), 0.0) + usd
            self._spend[(key_id, period)] = total
            return total

    def get_spend(self, key_id: str, period: str) -> float:
        with self._locked():
            return self._spend.get((key_id, period), 0.0)

    def spend_for(self, period_by_key: dict[str, str]) -> dict[str, float]:
        with self._locked():
            return {k: self._spend.get((k, p), 0.0) for k, p in period_by_key.items()}

    def stats(self, group_by: str, since: float, until: float, *, key_id: str | None = None,
              series: str | None = None) -> list[dict[str, Any]]:
        query = agg.StatsQuery(group_by, key_id, series)
        with self._locked():
            for (dim, hour, gkey), bucket in self._stats.items():
                if dim == query.dim and agg.in_window(hour, since, until):
                    query.add(gkey, hour, bucket)
        return query.rows()

    def purge(self, before: float) -> int:
        with self._locked():
            old = [rid for rid, row in self._decisions.items() if row.ts < before]
            for rid in old:
                del self._decisions[rid]
            self._usage = {rid: ts for rid, ts in self._usage.items() if ts >= before}
            self._stats = {k: v for k, v in self._stats.items() if k[1] + agg.HOUR > before}
            self._history = [h for h in self._history if h[2] >= before]
            self._audit = [a for a in self._audit if a["ts"] >= before]
            self._overrides = {i: o for i, o in self._overrides.items()
                               if o[0].expires_at >= before}
            return len(old)

    # -- overrides ------------------------------------------------------------

    def create_override(self, ov: Override) -> Override:
        if not self.has_ledger:
            raise ConflictError("overrides need a [ledger]; this gateway has none")
        with self._locked():
            if ov.id and ov.id in self._overrides:
                raise ConflictError(f"override {ov.id} already exists")
            new_id = ov.id
            while not new_id or new_id in self._overrides:
                self._next_override += 1
                new_id = str(self._next_override)
            stored = override_as_stored(ov, new_id)
            self._overrides[new_id] = (stored, False)
            return stored

    def list_overrides(self, now: float, *, include_expired: bool = False) -> list[Override]:
        with self._locked():
            found = [o for o, _ in self._overrides.values()
                     if include_expired or o.expires_at > now]
        return sorted(found, key=lambda o: o.created_at)

    def delete_override(self, id: str, *, by: str | None, now: float) -> Override | None:
        with self._locked():
            found = self._overrides.pop(id, None)
            if found is None:
                return None
            self._audit.append(audit_entry("remove", found[0], by, now))
            return found[0]

    def audit(self, action: str, override: Override, by: str | None, now: float) -> None:
        entry = audit_entry(action, override, by, now)
        with self._locked():
            self._audit.append(entry)

    def list_audit(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._locked():
            ordered = sorted(enumerate(self._audit), key=lambda e: (e[1]["ts"], e[0]),
                             reverse=True)
            return [dict(e) for _, e in ordered[:max(0, limit)]]

    def expire_due(self, now: float) -> list[Override]:
        with self._locked():
            due = [o for o, done in self._overrides.values() if not done and o.expires_at <= now]
            for ov in due:
                self._overrides[ov.id] = (ov, True)
                self._audit.append(audit_entry("expire", ov, None, ov.expires_at))
            return due

    # -- quota ----------------------------------------------------------------

    def put_quota_snapshot(self, provider: str, snapshot: dict[str, Any]) -> None:
        body = to_json(snapshot)
        with self._locked():
            self._snapshots[provider] = body

    def get_quota_snapshots(self) -> dict[str, dict[str, Any]]:
        with self._locked():
            return {p: json.loads(b) for p, b in self._snapshots.items()}

    def append_quota_history(self, sample: dict[str, Any]) -> None:
        entry = quota_sample(sample)
        with self._locked():
            self._history.append(entry)

    def list_quota_history(
        self, provider: str | None = None, since: float | None = None, limit: int = 500,
    ) -> list[dict[str, Any]]:
        with self._locked():
            found = [(ts, i, body) for i, (p, _, ts, body) in enumerate(self._history)
                     if (provider is None or p == provider) and (since is None or ts >= since)]
        found.sort(reverse=True)
        return [json.loads(body) for _, _, body in found[:max(0, limit)]]

    def last_quota_sample(self, provider: str, window: str) -> dict[str, Any] | None:
        with self._locked():
            found = [(ts, i, body) for i, (p, w, ts, body) in enumerate(self._history)
                     if p == provider and w == window]
        return json.loads(max(found)[2]) if found else None
