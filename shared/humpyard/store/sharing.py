"""The contracts of what several instances share on one store, beyond ``Store``
(``base.py``): the whole shared state in one read (``SharedStateReader``: DynamoDB,
the workers' SQLite file), and budget leases with per-key limit counters
(``LeaseStore``: docs/decisions/0016-budget-reservations.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from humpyard.planning.types import Override


@dataclass(frozen=True)
class SharedRequest:
    """What one ``read_shared`` call should bring back besides breakers and overrides.

    ``spend``: key id → period label; ``latency_buckets``: the time buckets
    to read; ``overrides_version``: the overrides version the caller holds
    (None: it holds none), so unchanged overrides are not read again.
    """

    spend: Mapping[str, str] = field(default_factory=dict)
    latency_buckets: tuple[int, ...] = ()
    overrides_version: int | None = None


@dataclass(frozen=True)
class SharedRead:
    """The answer of ``read_shared``.

    ``breakers`` as ``get_breakers``; ``spend`` has every key asked for;
    ``latency`` is target → bucket → ``(count, total_ms)`` for the buckets
    asked for; ``overrides`` is every stored override, expired ones included,
    or None when ``overrides_version`` is still the one the caller holds.
    """

    breakers: dict[str, dict[str, Any]]
    spend: dict[str, float]
    latency: dict[str, dict[int, tuple[int, float]]]
    overrides_version: int
    overrides: list[Override] | None


class SharedStateReader(Protocol):
    """A store that returns an instance's whole shared state in one read (DynamoDB)."""

    def read_shared(self, request: SharedRequest) -> SharedRead:
        """Breakers, spend, latency buckets and (when changed) overrides, in one read.

        Reflects every write completed before the call. Raises ``StoreError``.
        """
        ...


@dataclass(frozen=True, slots=True)
class LeaseAnswer:
    """The answer of ``LeaseStore.lease_budget``.

    ``granted``: the ``want`` asked for was added to the instance's lease;
    ``held``: the instance's lease after the write (USD); ``committed``: the
    key's spend in the period plus every live lease (this one included);
    ``holders``: live leases on the key's period, this instance's included.
    """

    granted: bool
    held: float
    committed: float
    holders: int


@dataclass(frozen=True, slots=True)
class LimitCount:
    """A key's shared per-key limit counters (``LeaseStore.take_limits``).

    ``refused`` names the limit that refused (``max_parallel_requests``,
    ``rpm_limit``, ``tpm_limit``) or is None when the request was counted;
    ``requests`` and ``tokens`` are the window's counts and ``in_flight`` the
    live slots of every instance, after this request when it was counted.
    """

    refused: str | None
    requests: int
    tokens: int
    in_flight: int


class LeaseStore(Protocol):
    """Budget leases and per-key limit counters shared by every instance on the store
    (docs/decisions/0016-budget-reservations.md, "Across instances: leases").

    Each method is one atomic step on the store (memory: a lock; SQLite: one
    ``BEGIN IMMEDIATE`` transaction, so atomic across processes on one file;
    DynamoDB: one conditional ``UpdateItem``, retried once after a reclaim).
    ``instance`` names the calling process or Lambda instance; ``expires_at``
    is when its lease (or its in-flight slots) stop counting unless renewed,
    so a dead instance strands them until then at most.
    """

    def lease_budget(self, key_id: str, period: str, instance: str, *, limit: float,
                     spent: float, held: float, want: float, now: float,
                     expires_at: float, keep: float = 0.0) -> LeaseAnswer:
        """Add ``spent`` to the key's spend in ``period``, set the instance's lease to
        ``held`` (what is left of it, never more than the store holds for it: a lease
        that expired is not revived; 0 returns it) and then, when ``want`` > 0, add
        ``want`` to the lease only if spend + every live lease + ``want`` + ``keep``
        <= ``limit`` (``keep``: room the caller leaves for the other instances).
        Leases that expired by ``now`` stop counting (and are removed)."""
        ...

    def take_limits(self, key_id: str, instance: str, *, window: float, rpm: int | None,
                    tpm: int | None, parallel: int | None, tokens: int, now: float,
                    expires_at: float) -> LimitCount:
        """Count one request (and ``tokens``) in the key's ``window`` and one in-flight
        slot of ``instance``, or nothing and name the limit that refuses: in flight
        >= ``parallel``, requests >= ``rpm``, or tokens > 0 and tokens + ``tokens``
        > ``tpm`` (the checks and their order are ``allowance.Allowance.admit``'s)."""
        ...

    def release_limits(self, key_id: str, instance: str, *, window: float, tokens: int,
                       parallel: bool, now: float, expires_at: float) -> None:
        """Give back one in-flight slot of ``instance`` (when ``parallel``) and add
        ``tokens`` (negative: the estimate minus the used tokens) to ``window``."""
        ...

    def limit_counts(self, key_id: str, *, window: float, now: float) -> LimitCount:
        """The key's counters now, across instances (explain); ``refused`` is None."""
        ...

    def renew_slots(self, instance: str, expires_at: float) -> None:
        """Extend the expiry of every in-flight slot row of ``instance``."""
        ...


@dataclass(frozen=True, slots=True)
class LimitLease:
    """The answer of ``DynamoDBLimits.lease_limits`` (and ``read_limits``).

    ``granted``: the requests, tokens and slot change asked for were added (the
    block, or the need when the block did not fit); ``got`` is (requests, tokens)
    added. ``requests`` and ``tokens`` are the window's totals handed out to every
    instance, ``in_flight`` the slots every live instance holds and ``slots`` this
    instance's, ``holders`` the instances that took blocks in the window, all after
    the write. ``refused`` names the limit that refused the need (None: granted).
    """

    granted: bool
    got: tuple[int, int]
    requests: int
    tokens: int
    in_flight: int
    slots: int
    holders: int
    refused: str | None = None
