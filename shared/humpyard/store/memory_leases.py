"""``MemoryStore``'s ``LeaseStore`` half: budget leases and per-key limit counters in dicts.

One process only (nothing else can reach the dicts), so this is the same
bookkeeping the SQLite and DynamoDB halves share across processes, under the
store's one lock (``store/sharing.py``, ``LeaseStore``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from humpyard.store.rows import check_usd
from humpyard.store.sharing import LeaseAnswer, LimitCount


class MemoryLeases:
    """Leases ``(key, period) → instance → (held, expires_at)``; each key's current
    minute ``(start, [requests, tokens])``; in-flight slots ``key → instance →
    (count, expires_at)``."""

    _spend: dict[tuple[str, str], float]

    def _locked(self) -> AbstractContextManager[None]:  # provided by MemoryStore
        raise NotImplementedError

    def _lease_tables(self) -> tuple[dict[tuple[str, str], dict[str, tuple[float, float]]],
                                     dict[str, tuple[float, list[int]]],
                                     dict[str, dict[str, tuple[int, float]]]]:
        d: Any = self.__dict__
        if "_leases" not in d:
            d["_leases"], d["_windows"], d["_slots"] = {}, {}, {}
        return d["_leases"], d["_windows"], d["_slots"]

    def lease_budget(self, key_id: str, period: str, instance: str, *, limit: float,
                     spent: float, held: float, want: float, now: float,
                     expires_at: float, keep: float = 0.0) -> LeaseAnswer:
        spent = check_usd(spent)
        with self._locked():
            leases, _, _ = self._lease_tables()
            book = leases.setdefault((key_id, period), {})
            for other in [i for i, (_, exp) in book.items() if exp <= now]:
                del book[other]
            if spent:
                self._spend[(key_id, period)] = self._spend.get((key_id, period), 0.0) + spent
            spend = self._spend.get((key_id, period), 0.0)
            others = sum(h for i, (h, _) in book.items() if i != instance)
            # never more than the store holds for it: an expired lease is not revived
            held = max(0.0, min(held, book.get(instance, (0.0, 0.0))[0]))
            granted = False
            if want > 0 and spend + others + held + want + keep <= limit + 1e-12:
                held += want
                granted = True
            if held > 0:
                book[instance] = (held, expires_at)
            else:
                book.pop(instance, None)
            return LeaseAnswer(granted=granted, held=held, committed=spend + others + held,
                               holders=len(book))

    def take_limits(self, key_id: str, instance: str, *, window: float, rpm: int | None,
                    tpm: int | None, parallel: int | None, tokens: int, now: float,
                    expires_at: float) -> LimitCount:
        with self._locked():
            _, windows, slots = self._lease_tables()
            current = windows.get(key_id)
            if current is None or current[0] != window:  # a new minute: the old one is gone
                current = windows[key_id] = (window, [0, 0])
            counts = current[1]
            rows = slots.setdefault(key_id, {})
            for other in [i for i, (_, exp) in rows.items() if exp <= now]:
                del rows[other]
            busy = sum(n for n, _ in rows.values())
            refused = _refusal(counts[0], counts[1], busy, rpm, tpm, parallel, tokens)
            if refused is None:
                counts[0] += 1
                if tpm is not None:
                    counts[1] += tokens
                if parallel is not None:
                    rows[instance] = (rows.get(instance, (0, 0.0))[0] + 1, expires_at)
                    busy += 1
            return LimitCount(refused, counts[0], counts[1], busy)

    def release_limits(self, key_id: str, instance: str, *, window: float, tokens: int,
                       parallel: bool, now: float, expires_at: float) -> None:
        with self._locked():
            _, windows, slots = self._lease_tables()
            current = windows.get(key_id)
            counts = current[1] if current is not None and current[0] == window else None
            if counts is not None and tokens:
                counts[1] = max(0, counts[1] + tokens)
            rows = slots.get(key_id, {})
            if parallel and instance in rows:
                n = rows[instance][0] - 1
                if n > 0:
                    rows[instance] = (n, expires_at)
                else:
                    del rows[instance]

    def limit_counts(self, key_id: str, *, window: float, now: float) -> LimitCount:
        with self._locked():
            _, windows, slots = self._lease_tables()
            current = windows.get(key_id)
            counts = current[1] if current is not None and current[0] == window else [0, 0]
            busy = sum(n for n, exp in slots.get(key_id, {}).values() if exp > now)
            return LimitCount(None, counts[0], counts[1], busy)

    def renew_slots(self, instance: str, expires_at: float) -> None:
        with self._locked():
            _, _, slots = self._lease_tables()
            for rows in slots.values():
                if instance in rows:
                    rows[instance] = (rows[instance][0], expires_at)


def _refusal(requests: int, tokens_used: int, busy: int, rpm: int | None, tpm: int | None,
             parallel: int | None, tokens: int) -> str | None:
    """The limit that refuses one more request, in ``Allowance.admit``'s order, or None."""
    if parallel is not None and busy >= parallel:
        return "max_parallel_requests"
    if rpm is not None and requests >= rpm:
        return "rpm_limit"
    if tpm is not None and tokens_used > 0 and tokens_used + tokens > tpm:
        return "tpm_limit"
    return None


refusal = _refusal
