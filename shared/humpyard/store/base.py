"""The store contracts. Every backend (memory, SQLite, DynamoDB) provides ``Store``.

All methods are synchronous and may block on I/O: the gateway calls them
from a worker thread (``store.writer.BackgroundWriter`` for writes,
``store.writer.run`` for reads), never on the event loop. Every method is
safe to call from several threads at once. Times are epoch seconds (floats)
supplied by the caller from its injected clock; a store never reads the
system clock to decide anything.

Errors: a backend failure raises ``humpyard.errors.StoreError``; a write
that loses a uniqueness or compare-and-set check raises ``ConflictError``
(or, for ``put_breaker``, returns ``False``); an argument that breaks the
contract (a decision without ``request_id``, an unknown ``group_by``, a bad
cursor) raises ``ValueError``.

What several instances share beyond this (the one-read state, budget leases and
per-key limit counters) has its contracts in ``sharing.py``.

Dicts handed to a store must be JSON-ready; what is read back is a fresh
copy equal to what was written (JSON round-trip: tuples come back as lists),
so callers may mutate it freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from humpyard.planning.types import Override

Decision = dict[str, Any]


@dataclass(slots=True)
class LedgerBatch:
    """What the ledger writer hands a store in one ``write_batch`` call.

    ``decisions`` in submission order; ``spend`` maps ``(key_id, period)`` to
    the USD to add (the writer has already summed the adds of one key and
    period, so each pair appears once).
    """

    decisions: list[Decision] = field(default_factory=list)
    spend: dict[tuple[str, str], float] = field(default_factory=dict)

    def __len__(self) -> int:
        """Items in the batch: decisions plus spend totals."""
        return len(self.decisions) + len(self.spend)


class LedgerStore(Protocol):
    """Decisions, usage, spend and stats: what happened, kept for ``decision_retention_days``.

    A decision is a JSON-ready dict. The store relies on these fields (the
    rest is stored as JSON and returned unchanged):

    - ``request_id`` (str, required, unique), ``ts`` (epoch float, required)
    - ``route``, ``rule``, ``outcome`` (``ok``, ``failed``, ``stream_broken``,
      ``refused`` or a refusal code), ``key_id`` (None on an open gateway),
      ``status`` (int), ``target`` and ``provider`` (the ones that served,
      None when nothing did), ``latency_ms``, ``cost_usd``, ``prompt_tokens``
    - ``usage``: ``{"input_tokens", "output_tokens", "cache_read_tokens",
      "cache_write_tokens"}`` (the cache counts may be absent), or absent/None
    - ``attempts``: a list of ``{"target", "provider", "status",
      "failure_class", "latency_ms", "skipped"}`` (``Attempt.to_dict``)

    How stats count them is in ``store.aggregates``: per route and key a
    decision is one request, failed when its outcome is ``failed`` or
    ``stream_broken``, with its latency in the p50 when ``ok``; per target
    and provider each attempted call is one request (so failover shows up
    as the failures of the targets that failed), and only answered attempts
    enter the p50. Cost and tokens go to the groups of the decision itself.
    """

    def append_decision(self, decision: Decision) -> None:
        """Record one decision, atomically with its stats and usage rows.

        In the same write: the hourly stats bucket of each group (route,
        target, provider, key) is updated, and when ``usage`` is a dict a
        ``usage`` row of kind ``answer`` is written. A second decision with
        the same ``request_id`` raises ``ConflictError`` and changes nothing,
        so a retried write never double-counts.
        """
        ...

    def write_batch(self, batch: LedgerBatch) -> None:
        """Write everything in ``batch``: its decisions (each with its usage row and
        stats, as ``append_decision`` does) and its spend adds.

        A decision whose ``request_id`` is already recorded, or appears earlier
        in the same batch, is skipped: never counted twice, and never a reason
        to fail the rest. The whole batch is validated before anything is
        written: a decision ``append_decision`` would refuse, or a spend amount
        ``add_spend`` would refuse, raises ``ValueError`` naming it and writes
        nothing, so the caller may retry the other items. A backend failure
        raises ``StoreError``; SQLite writes the batch in one transaction, so
        then nothing of it was written. A backend that cannot (DynamoDB) raises
        a ``StoreError`` whose ``unwritten`` is the part of the batch that is
        missing, for the writer to count and log.
        """
        ...

    def list_decisions(
        self, *, route: str | None = None, rule: str | None = None,
        outcome: str | None = None, key_id: str | None = None,
        since: float | None = None, limit: int = 50, cursor: str | None = None,
    ) -> tuple[list[Decision], str | None]:
        """A page of decisions, newest first, and the cursor of the next page.

        Filters combine with AND; ``since`` keeps ``ts >= since``. Order is
        ``(ts, request_id)`` descending, so paging with the returned cursor
        visits every matching decision exactly once even when ``ts`` ties and
        while new decisions arrive. ``limit`` is clamped to 1..1000. The cursor
        is opaque and None when there is no further page; pass the same
        filters with it. A malformed cursor raises ``ValueError``.
        """
        ...

    def get_decision(self, request_id: str) -> Decision | None:
        """The decision as appended, or None."""
        ...

    def add_spend(self, key_id: str, period: str, usd: float) -> float:
        """Atomically add ``usd`` to the key's spend in ``period`` and return the new total.

        ``period`` is an opaque label computed by the caller
        (``ledger.period_key``: ``day:2026-11-30``, ``month:2026-11``).
        Concurrent adds are never lost. ``usd`` must be finite (``ValueError``).
        """
        ...

    def get_spend(self, key_id: str, period: str) -> float:
        """The key's total for ``period``; 0.0 when nothing was spent."""
        ...

    def spend_for(self, period_by_key: dict[str, str]) -> dict[str, float]:
        """``get_spend`` for many keys in one read: every key given is in the answer."""
        ...

    def stats(self, group_by: str, since: float, until: float, *, key_id: str | None = None,
              series: str | None = None) -> list[dict[str, Any]]:
        """Per-group totals over the hourly buckets that overlap ``[since, until)``.

        ``key_id``: only that key's requests (grouped by ``group_by``; with
        ``group_by="key"`` its one group). ``series`` (``hour`` or ``day``, UTC):
        each entry also has ``series``, its non-empty buckets oldest first, each
        ``{t, requests, failures, cost_usd, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens}`` with ``t`` the bucket's start.

        ``group_by`` is ``route``, ``target``, ``provider`` or ``key``. Each
        entry: ``key`` (None for decisions without that field), ``requests``
        (attempts, for targets and providers), ``failures``, ``failure_rate``,
        ``p50_latency_ms`` (None without samples; interpolated from a
        log-scale histogram, accurate to within one ~1.39x bucket),
        ``cost_usd``, ``input_tokens``, ``output_tokens``, ``cache_read_tokens``,
        ``cache_write_tokens``, ``cache_hit_ratio`` (reads over input tokens). Busiest group
        first. Resolution is one hour; the answer is computed from the
        aggregates, never by scanning decisions.
        """
        ...

    def purge(self, before: float) -> int:
        """Delete what is older than ``before``; return the number of decisions deleted.

        Removes decisions and usage rows with ``ts < before``, stats buckets
        whose hour ended by ``before``, quota history samples and override
        audit entries with ``ts < before``, and overrides that expired before
        ``before``. Spend totals are kept (they are per period and tiny).
        """
        ...


class OverrideStore(Protocol):
    """Runtime overrides and their audit trail.

    ``Override.stale`` is never stored: it is worked out by the caller
    against the loaded configuration, and the store always returns False.
    Audit entries are dicts ``{"ts", "action", "override_id", "by", "kind",
    "subject", "target", "reason", "expires_at"}`` where ``by`` is the key
    id (never the key) or None.
    """

    def create_override(self, ov: Override) -> Override:
        """Store ``ov`` and return it as stored; the caller records the creation with
        ``audit("create", ...)``.

        An empty ``ov.id`` is replaced by the next of ``"1"``, ``"2"``, ...
        (never reused within a store, even after deletes). An explicit id
        that exists raises ``ConflictError``. A store without a ledger
        (``has_ledger`` False) raises ``ConflictError``.
        """
        ...

    def list_overrides(self, now: float, *, include_expired: bool = False) -> list[Override]:
        """Overrides in creation order; only ``expires_at > now`` unless ``include_expired``."""
        ...

    def delete_override(self, id: str, *, by: str | None, now: float) -> Override | None:
        """Remove an override (expired or not), record a ``remove`` audit entry, return it.

        None (and no audit entry) when no such override is stored.
        """
        ...

    def audit(self, action: str, override: Override, by: str | None, now: float) -> None:
        """Append an audit entry (``create`` after ``create_override``; ``delete_override``
        and ``expire_due`` write their own ``remove`` and ``expire`` entries)."""
        ...

    def list_audit(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` audit entries, newest first."""
        ...

    def expire_due(self, now: float) -> list[Override]:
        """Record an ``expire`` audit entry (at ``expires_at``) for each override that has
        expired by ``now`` and was not recorded yet, and return those overrides.

        Each expiry is returned and audited exactly once, even with concurrent
        callers. Expired overrides stay listed with ``include_expired`` until
        ``purge``.
        """
        ...


class QuotaStore(Protocol):
    """Provider quota snapshots (the latest per provider) and their sampled history."""

    def put_quota_snapshot(self, provider: str, snapshot: dict[str, Any]) -> None:
        """Replace the provider's latest snapshot."""
        ...

    def get_quota_snapshots(self) -> dict[str, dict[str, Any]]:
        """Every provider's latest snapshot, as put."""
        ...

    def append_quota_history(self, sample: dict[str, Any]) -> None:
        """Append one sample: ``provider``, ``window``, ``ts`` (required), ``percent``,
        ``status``, ``resets_at``, ``cost_usd_since_previous``; returned unchanged."""
        ...

    def list_quota_history(
        self, provider: str | None = None, since: float | None = None, limit: int = 500,
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` samples (``ts >= since``), newest first."""
        ...

    def last_quota_sample(self, provider: str, window: str) -> dict[str, Any] | None:
        """The newest sample of one provider's window, or None."""
        ...


class LiveStateStore(Protocol):
    """Shared endpoint health and latency: in process memory locally, DynamoDB on AWS."""

    def get_breakers(self) -> dict[str, dict[str, Any]]:
        """Every stored breaker state by endpoint key (``provider/model``)."""
        ...

    def get_breaker(self, key: str) -> dict[str, Any] | None:
        """One breaker state, or None when never stored."""
        ...

    def put_breaker(
        self, key: str, state: dict[str, Any], expected_version: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        """Compare-and-set: store ``state`` only if the stored version is ``expected_version``.

        ``expected_version`` None means "must not exist yet". ``state["version"]``
        must be an int greater than ``expected_version`` (``ValueError``
        otherwise), so a version is never reused. Returns ``(True, state as
        stored)`` on success and ``(False, current stored state or None)`` when
        another writer got there first; of two writers with the same expected
        version exactly one wins.
        """
        ...

    def add_latency(self, samples: dict[str, tuple[int, float]], bucket: int) -> None:
        """Atomically add ``(count, total_ms)`` per target to time bucket ``bucket``."""
        ...

    def get_latency(self, since_bucket: int) -> dict[str, list[tuple[int, int, float]]]:
        """Per target, ``(bucket, count, total_ms)`` for buckets ``>= since_bucket``, ascending."""
        ...

    def purge_latency(self, before_bucket: int) -> int:
        """Drop latency buckets older than ``before_bucket``; return how many were dropped."""
        ...


class Store(LedgerStore, OverrideStore, QuotaStore, LiveStateStore, Protocol):
    """Everything the gateway keeps, behind one object.

    ``kind`` names the backend (``memory``, ``sqlite``, ``dynamodb``).
    ``has_ledger`` is False only for a memory store created without a
    ledger: overrides are then refused (the gateway answers 409) because
    nothing would survive a restart. ``close`` releases the backend; it is
    idempotent, and any other call after it raises ``StoreError``.
    """

    kind: str
    has_ledger: bool

    def close(self) -> None: ...

    def ping(self) -> None:
        """Raise ``StoreError`` unless the backend answers now (``GET /readyz``): a
        closed store, a ledger file that is gone, an unreachable table. Cheap."""
        ...

