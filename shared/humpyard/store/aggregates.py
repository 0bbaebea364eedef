"""Stats aggregates every store backend shares: what a decision adds, and the answer.

Pure, no I/O. ``contributions`` says what one decision adds to which hourly
bucket; ``stats_rows`` turns summed buckets into the answer of
``LedgerStore.stats``. Keeping this in one place is what makes every backend
answer the same numbers for the same decisions.

What is counted, per ``group_by``:

- ``route`` and ``key``: each decision is one request; a failure when its
  outcome is in ``FAILURE_OUTCOMES``; its ``latency_ms`` enters the p50 only
  when the outcome is ``ok``.
- ``target`` and ``provider``: each attempted call in ``attempts`` (skipped
  ones aside) is one request, so a request that failed over counts once for
  every target it tried; an attempt fails unless it got a status below 400
  and no ``failure_class``, and only answered attempts enter the p50. A
  decision without an ``attempts`` list counts as one request of its own
  ``target``/``provider``, as for routes.
- ``cost_usd`` and tokens always go to the decision's own route, key,
  target and provider (the one that served). Input tokens count every prompt
  token; ``cache_read_tokens`` and ``cache_write_tokens`` are the part of them
  read from and written to a provider's prompt cache, and ``cache_hit_ratio``
  is cache reads over input tokens.

Each decision with a key is counted a second time under the scoped
dimensions ``SCOPED`` (``key.route``, ``key.target``, ``key.provider``),
whose group key is ``scope_prefix(key_id) + value``: what ``stats(...,
key_id=...)`` reads, so one key's requests can be grouped by route, target or
provider (a key without ``admin`` sees only those: docs/security.md). The
prefix carries the key id's length, so no key id or name can pass for
another's.

``StatsQuery`` is what every backend's ``stats`` shares: it keeps the groups
one ``group_by`` (and key) asks for, and with ``series`` (``hour`` or
``day``, UTC) each group's buckets over time.

Latency is kept as a fixed log-scale histogram: ``HIST_BUCKETS`` buckets
from ``HIST_MIN_MS`` to ``HIST_MAX_MS``, each about 1.39 times wider than
the one before; anything outside falls in the first or last bucket. The
p50 is interpolated geometrically inside its bucket, so it is accurate to
well within one bucket's width.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from humpyard.store.decisions import DecisionRow

STATS_GROUPS = ("route", "target", "provider", "key")
"""The ``group_by`` values ``stats`` accepts; ``key`` groups by ``key_id``."""
SCOPED = {"route": "key.route", "target": "key.target", "provider": "key.provider"}
"""The dimension holding one key's requests grouped by route, target or provider."""
STATS_DIMS = STATS_GROUPS + tuple(SCOPED.values())
"""Every dimension a store keeps buckets of."""

HOUR = 3600
DAY = 86400
SERIES_STEPS = {"hour": HOUR, "day": DAY}
HIST_BUCKETS = 40
HIST_MIN_MS = 1.0
HIST_MAX_MS = 600_000.0
_LOG_RATIO = math.log(HIST_MAX_MS / HIST_MIN_MS) / HIST_BUCKETS


def hour_of(ts: float) -> int:
    """The start of the UTC hour holding ``ts``: the bucket a decision's stats go to."""
    return int(ts // HOUR) * HOUR


def scope_prefix(key_id: str) -> str:
    """The start of every scoped group key of ``key_id`` (its length, so unambiguous)."""
    return f"{len(key_id)}:{key_id}|"


def in_window(hour: int, since: float, until: float) -> bool:
    """Whether the hourly bucket starting at ``hour`` overlaps ``[since, until)``."""
    return hour_of(since) <= hour < until


def latency_bucket(ms: float) -> int:
    """The histogram bucket ``ms`` falls in."""
    if ms <= HIST_MIN_MS:
        return 0
    return min(int(math.log(ms / HIST_MIN_MS) / _LOG_RATIO), HIST_BUCKETS - 1)


def bucket_bounds(index: int) -> tuple[float, float]:
    """The ``[low, high)`` milliseconds of histogram bucket ``index``."""
    return (HIST_MIN_MS * math.exp(_LOG_RATIO * index),
            HIST_MIN_MS * math.exp(_LOG_RATIO * (index + 1)))


def percentile(hist: Mapping[int, int], q: float = 0.5) -> float | None:
    """The ``q`` quantile of a histogram, interpolated in its bucket; None when empty."""
    total = sum(n for n in hist.values() if n > 0)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index in sorted(hist):
        count = hist[index]
        if count <= 0:
            continue
        if seen + count >= rank:
            low, high = bucket_bounds(index)
            return low * (high / low) ** ((rank - seen) / count)
        seen += count
    return bucket_bounds(max(hist))[1]  # pragma: no cover - float rounding guard


@dataclass(slots=True)
class Aggregate:
    """Summed counters of one group: one decision's share, one hourly bucket, or a window."""

    requests: int = 0
    failures: int = 0
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    hist: dict[int, int] = field(default_factory=dict)

    def count(self, failed: bool, bucket: int | None) -> None:
        """One request (or attempt) whose latency is in histogram ``bucket``
        (``latency_bucket``); None keeps it out of the p50."""
        self.requests += 1
        self.failures += int(failed)
        if bucket is not None:
            self.hist[bucket] = self.hist.get(bucket, 0) + 1

    def charge(self, row: DecisionRow) -> None:
        self.cost_usd += row.cost_usd or 0.0
        self.input_tokens += row.input_tokens or 0
        self.output_tokens += row.output_tokens or 0
        self.cache_read_tokens += row.cache_read_tokens or 0
        self.cache_write_tokens += row.cache_write_tokens or 0

    def merge(self, other: Aggregate) -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.cost_usd += other.cost_usd
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        for b, n in other.hist.items():
            self.hist[b] = self.hist.get(b, 0) + n


def _add(row: DecisionRow, at: Callable[[str, str | None], Aggregate]) -> None:
    """Count ``row`` into the aggregates ``at(group_by, value)`` returns, and a
    decision with a key once more into its key's ``SCOPED`` dimensions.

    A missing group value (no key on an open gateway, no target on a refusal)
    is passed as ``None``; the buckets keep it as the empty string and ``stats``
    answers show ``None``."""
    _add_dims(row, at, (("route", row.route), ("key", row.key_id)))
    if row.key_id:
        prefix = scope_prefix(row.key_id)

        def scoped(dim: str, value: str | None) -> Aggregate:
            return at(SCOPED[dim], prefix + (value or ""))
        _add_dims(row, scoped, (("route", row.route),))


def _add_dims(row: DecisionRow, at: Callable[[str, str | None], Aggregate],
              own_dims: tuple[tuple[str, str | None], ...]) -> None:
    failed = row.failed
    own = None if row.outcome != "ok" or row.latency_ms is None \
        else latency_bucket(row.latency_ms)
    served = (("target", row.target), ("provider", row.provider))
    for dim, value in own_dims:
        a = at(dim, value)
        a.count(failed, own)
        a.charge(row)
    if row.attempts is None:
        for dim, value in served:
            a = at(dim, value)
            a.count(failed, own)
            a.charge(row)
        return
    for attempt in row.attempts:
        bucket = None if attempt.failed or attempt.latency_ms is None \
            else latency_bucket(attempt.latency_ms)
        at("target", attempt.target).count(attempt.failed, bucket)
        at("provider", attempt.provider).count(attempt.failed, bucket)
    if row.target is not None or row.cost_usd or row.input_tokens or row.output_tokens:
        for dim, value in served:
            at(dim, value).charge(row)


def bucket_totals(rows: Iterable[DecisionRow]) -> dict[tuple[str, int, str], Aggregate]:
    """What many decisions add, summed per ``(group_by, hour, group key)`` bucket.

    A batch of decisions touches few buckets (a handful of routes, targets,
    providers and keys in one or two hours), so a batch writer updates each
    bucket once instead of once per decision.
    """
    out: dict[tuple[str, int, str], Aggregate] = {}
    add_into(out, rows)
    return out


def add_into(buckets: dict[tuple[str, int, str], Aggregate],
             rows: Iterable[DecisionRow]) -> None:
    """Add ``rows`` to ``buckets`` (keyed ``(group_by, hour, group key)``) in place:
    ``bucket_totals`` without a new dict, for a store that keeps its buckets in
    memory and adds each decision as it comes."""
    hour = 0

    def at(dim: str, value: str | None) -> Aggregate:
        key = (dim, hour, value or "")
        found = buckets.get(key)
        if found is None:
            found = buckets[key] = Aggregate()
        return found

    for row in rows:
        hour = hour_of(row.ts)
        _add(row, at)


def stats_rows(groups: Mapping[str, Aggregate]) -> list[dict[str, Any]]:
    """The ``stats`` answer: one dict per group, busiest first, then by key."""
    rows: list[dict[str, Any]] = []
    for key, agg in groups.items():
        p50 = percentile(agg.hist)
        rows.append({
            "key": key or None,
            "requests": agg.requests,
            "failures": agg.failures,
            "failure_rate": round(agg.failures / agg.requests, 4) if agg.requests else 0.0,
            "p50_latency_ms": None if p50 is None else round(p50, 1),
            "cost_usd": round(agg.cost_usd, 6),
            "input_tokens": agg.input_tokens,
            "output_tokens": agg.output_tokens,
            "cache_read_tokens": agg.cache_read_tokens,
            "cache_write_tokens": agg.cache_write_tokens,
            "cache_hit_ratio": round(agg.cache_read_tokens / agg.input_tokens, 4)
            if agg.input_tokens else 0.0,
        })
    rows.sort(key=lambda r: (-int(r["requests"]), r["key"] or ""))
    return rows


class StatsQuery:
    """One ``stats`` read: which buckets it keeps, summed per group (and per
    ``series`` step), whatever backend hands them over.

    ``dim`` is the dimension to read; ``add``/``add_hist`` take a bucket's
    group key (those of other keys are dropped) and ``rows`` gives the answer.
    """

    __slots__ = ("dim", "prefix", "exact", "step", "groups", "series")

    def __init__(self, group_by: str, key_id: str | None = None,
                 series: str | None = None) -> None:
        check_group_by(group_by)
        if series is not None and series not in SERIES_STEPS:
            raise ValueError(f"series must be one of {', '.join(SERIES_STEPS)}, not {series!r}")
        self.step = SERIES_STEPS[series] if series else 0
        self.exact: str | None = None
        self.prefix = ""
        if key_id is None:
            self.dim = group_by
        elif group_by == "key":
            self.dim, self.exact = "key", key_id
        else:
            self.dim, self.prefix = SCOPED[group_by], scope_prefix(key_id)
        self.groups: dict[str, Aggregate] = {}
        self.series: dict[str, dict[int, Aggregate]] = {}

    def _name(self, gkey: str) -> str | None:
        if self.exact is not None:
            return gkey if gkey == self.exact else None
        if self.prefix:
            return gkey[len(self.prefix):] if gkey.startswith(self.prefix) else None
        return gkey

    def add(self, gkey: str, hour: int, share: Aggregate) -> None:
        """Add one hourly bucket (its latency histogram included, if it has one)."""
        name = self._name(gkey)
        if name is None:
            return
        self.groups.setdefault(name, Aggregate()).merge(share)
        if self.step:
            start = hour // self.step * self.step
            points = self.series.setdefault(name, {})
            points.setdefault(start, Aggregate()).merge(share)

    def add_hist(self, gkey: str, bucket: int, count: int) -> None:
        """Add a latency histogram count (kept apart from the counters by SQLite)."""
        name = self._name(gkey)
        if name is not None:
            hist = self.groups.setdefault(name, Aggregate()).hist
            hist[bucket] = hist.get(bucket, 0) + count

    def rows(self) -> list[dict[str, Any]]:
        """The answer: ``stats_rows``, each group with its ``series`` when asked."""
        rows = stats_rows(self.groups)
        if self.step:
            for row in rows:
                points = self.series.get(row["key"] or "", {})
                row["series"] = [_point(t, points[t]) for t in sorted(points)]
        return rows


def _point(start: int, a: Aggregate) -> dict[str, Any]:
    return {"t": start, "requests": a.requests, "failures": a.failures,
            "cost_usd": round(a.cost_usd, 6), "input_tokens": a.input_tokens,
            "output_tokens": a.output_tokens, "cache_read_tokens": a.cache_read_tokens,
            "cache_write_tokens": a.cache_write_tokens}


def check_group_by(group_by: str) -> str:
    """``group_by`` itself, or ``ValueError`` naming the accepted values."""
    if group_by not in STATS_GROUPS:
        raise ValueError(f"group_by must be one of {', '.join(STATS_GROUPS)}, not {group_by!r}")
    return group_by
