"""What a key may still spend and send: budget reservations and per-key limits.

One ``Allowance`` per gateway process (or Lambda instance). A request is
admitted in two steps, both synchronous so that no other request of the
event loop runs between the check and the taking:

1. ``admit(key, tokens, now)`` checks the key's ``max_parallel_requests``,
   ``rpm_limit`` and ``tpm_limit`` and, when all pass, takes one request slot,
   one request of the minute and the estimated tokens; beyond a limit it
   raises ``RateLimited`` (nothing taken), naming the limit;
2. after planning, ``reserve(hold, key_id, usd)`` reserves the worst-case cost
   of the planned targets against the key's budget (``reserved()`` is what
   the next snapshot shows the budget policy, so a reservation that does not
   fit removes the priced targets: docs/routing.md, "Budgets").

``settle(hold, tokens)`` gives everything back once, when the request's record
closes (``recording.py``): the slot, the reservation (the real cost is counted
as spend by the record), and the difference between the estimated and the
used tokens of the minute it was admitted in.

Across instances sharing a store (``leases.py``): the budget is reserved
from a lease of it (``reserve_budget``, which may await a store write), and
the per-key limits are counted in the store (``admit_shared``): per request on
SQLite, in blocks of each minute on DynamoDB (``limit_blocks.py``).

Windows are fixed minutes of the injected clock (``floor(now / 60)``): a
limit of N allows N in each clock minute, so any 60 seconds straddling a
minute's end can see up to 2N (docs/decisions/0016-budget-reservations.md).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from humpyard.config.spec import KeySpec
from humpyard.errors import RateLimited, StoreError, StoreUnavailable
from humpyard.leases import Leases
from humpyard.ledger.periods import period_key
from humpyard.store.sharing import LimitCount

log = logging.getLogger("humpyard.leases")

WINDOW_SECS = 60.0


@dataclass(slots=True)
class Hold:
    """What one request took at admission; ``Allowance.settle`` gives it back once."""

    key_id: str
    window: float = 0.0  # the start of the minute the tokens were counted in
    tokens: int = 0  # tokens counted against tpm_limit
    parallel: bool = False  # holds one of max_parallel_requests
    usd: float = 0.0  # reserved against the budget
    settled: bool = False
    period: str | None = None  # the budget period of a reservation from a lease
    shared: bool = False  # counted in the store's shared per-key limit counters


@dataclass(frozen=True, slots=True)
class LimitState:
    """A key's limits as one request saw them (after taking its own share)."""

    rpm_limit: int | None
    requests_left: int
    tpm_limit: int | None
    tokens_left: int
    parallel_limit: int | None
    in_flight: int
    reset_at: float  # the end of the current window (epoch seconds)
    now: float

    def to_dict(self) -> dict[str, object]:
        """Explain's ``limits``: a remainder is None where its limit is not set."""
        return {"rpm_limit": self.rpm_limit,
                "requests_remaining": None if self.rpm_limit is None else self.requests_left,
                "tpm_limit": self.tpm_limit,
                "tokens_remaining": None if self.tpm_limit is None else self.tokens_left,
                "max_parallel_requests": self.parallel_limit, "in_flight": self.in_flight,
                "window": "fixed_minute", "resets_at": _rfc3339(self.reset_at),
                "reset_secs": _ceil(self.reset_at - self.now)}


@dataclass(slots=True)
class _Minute:
    start: float
    requests: int = 0
    tokens: int = 0


def limited(key: KeySpec | None) -> bool:
    """Whether ``key`` has any per-key limit (its answers carry rate-limit headers)."""
    return key is not None and (key.rpm_limit is not None or key.tpm_limit is not None
                                or key.max_parallel_requests is not None)


class Allowance:
    """Per-key in-flight counts, minute windows and budget reservations of one process."""

    def __init__(self, leases: Leases | None = None) -> None:
        self.leases = leases
        self._lock = threading.Lock()
        self._reserved: dict[str, float] = {}
        self._minutes: dict[str, _Minute] = {}
        self._in_flight: dict[str, int] = {}

    # -- budget reservations ------------------------------------------------

    def reserved(self) -> dict[str, float]:
        """Key id → USD reserved by requests in flight (only keys with some)."""
        return dict(self._reserved) if self._reserved else {}

    def reserve(self, hold: Hold, usd: float) -> None:
        """Reserve ``usd`` more for ``hold``'s request (released by ``settle``)."""
        if usd <= 0 or hold.settled:
            return
        with self._lock:
            hold.usd += usd
            self._reserved[hold.key_id] = self._reserved.get(hold.key_id, 0.0) + usd

    async def reserve_budget(self, hold: Hold, key: KeySpec, usd: float, now: float, *,
                             spend_read: Callable[[], bool] | None = None) -> bool:
        """Reserve ``usd`` of ``key``'s budget for ``hold``'s request: from this
        instance's lease of it when the store leases budgets (taking a larger lease
        may await one store write), else locally. False: the budget has no room for
        it across every instance sharing the store (nothing reserved). ``spend_read``: whether
        this process has read the key's spend, asked only when a lease cannot be
        written (without it, the store unreachable: ``BudgetUnknown``, ``Leases.take``)."""
        leases = self.leases
        if usd <= 0 or hold.settled:
            return True
        if key.budget is None or leases is None or not leases.budgets:
            self.reserve(hold, usd)
            return True
        period = period_key(key.budget.period, now)
        if not leases.reserve_now(key.id, period, key.budget.usd, usd) \
                and not await leases.take(key.id, period, key.budget.usd, usd,
                                         spend_read=spend_read):
            return False
        if hold.settled:  # the request ended while the lease was taken
            leases.unreserve(key.id, period, usd)
            return True
        hold.period = period
        self.reserve(hold, usd)
        return True

    def count_spend(self, key_id: str, period: str, usd: float) -> bool:
        """Count spend with the key's lease (True: written with it, batched), or False:
        the caller writes it through the ledger writer."""
        return self.leases is not None and self.leases.spend(key_id, period, usd)

    def close(self) -> None:
        """Write pending spend and give the leases back (shutdown). Blocking."""
        if self.leases is not None:
            self.leases.close()

    # -- per-key limits -------------------------------------------------------

    def shared(self, key: KeySpec | None) -> bool:
        """Whether ``key``'s limits are counted in the store, across instances."""
        return limited(key) and self.leases is not None and self.leases.limits

    async def admit_shared(self, key: KeySpec, tokens: int,
                           now: float) -> tuple[Hold, LimitState | None]:
        """``admit`` against the counters every instance on the store shares (one store
        transaction, in a worker thread); local when the store does not share them."""
        leases = self.leases
        if leases is None or not self.shared(key):
            return self.admit(key, tokens, now)
        start = math.floor(now / WINDOW_SECS) * WINDOW_SECS
        try:
            counted = await leases.take_limits(key.id, window=start, rpm=key.rpm_limit,
                                               tpm=key.tpm_limit,
                                               parallel=key.max_parallel_requests,
                                               tokens=tokens, now=now)
        except StoreError as e:  # the store is down: this process's own counts stand
            if not isinstance(e, StoreUnavailable):  # an outage is logged once (awaited.py)
                log.warning("per-key limits of key %s could not be counted in the store "
                            "(%s); counting them in this process", key.id, e)
            return self.admit(key, tokens, now)
        state = _shared_state(key, counted, start, now)
        if counted.refused is not None:
            limit = counted.refused
            wait = 1.0 if limit == "max_parallel_requests" else start + WINDOW_SECS - now
            why = {"max_parallel_requests":
                   f"{counted.in_flight} requests of this key are in flight; "
                   f"max_parallel_requests is {key.max_parallel_requests}",
                   "rpm_limit": f"this key has made {counted.requests} requests this "
                   f"minute; rpm_limit is {key.rpm_limit}",
                   "tpm_limit": f"this key has used {counted.tokens} tokens this minute "
                   f"and this request may use {tokens} more; tpm_limit is "
                   f"{key.tpm_limit}"}[limit]
            raise _refused(key, limit, why, wait, state)
        hold = Hold(key.id, window=start, shared=True,
                    tokens=tokens if key.tpm_limit is not None else 0,
                    parallel=key.max_parallel_requests is not None)
        return hold, state

    async def state_shared(self, key: KeySpec, now: float) -> LimitState:
        """``state`` from the store's shared counters when they are shared (explain)."""
        leases = self.leases
        if leases is None or not self.shared(key):
            return self.state(key, now)
        start = math.floor(now / WINDOW_SECS) * WINDOW_SECS
        try:
            return _shared_state(key, await leases.counts(key.id, start, now), start, now)
        except StoreError as e:
            if not isinstance(e, StoreUnavailable):
                log.warning("per-key limits of key %s could not be read (%s)", key.id, e)
            return self.state(key, now)


    def _minute(self, key_id: str, now: float) -> _Minute:
        start = math.floor(now / WINDOW_SECS) * WINDOW_SECS
        m = self._minutes.get(key_id)
        if m is None or m.start != start:
            m = self._minutes[key_id] = _Minute(start)
        return m

    def state(self, key: KeySpec, now: float) -> LimitState:
        """The key's limits now, without taking anything (explain)."""
        with self._lock:
            return self._state(key, self._minute(key.id, now), now)

    def _state(self, key: KeySpec, m: _Minute, now: float) -> LimitState:
        return LimitState(
            rpm_limit=key.rpm_limit,
            requests_left=max(0, (key.rpm_limit or 0) - m.requests),
            tpm_limit=key.tpm_limit,
            tokens_left=max(0, (key.tpm_limit or 0) - m.tokens),
            parallel_limit=key.max_parallel_requests,
            in_flight=self._in_flight.get(key.id, 0),
            reset_at=m.start + WINDOW_SECS, now=now)

    def admit(self, key: KeySpec, tokens: int, now: float) -> tuple[Hold, LimitState | None]:
        """Take one request (and ``tokens``) of ``key``'s limits, or raise ``RateLimited``.

        A request whose estimate alone is over ``tpm_limit`` is admitted only into
        a minute where the key has used no tokens yet (it could never fit otherwise).
        """
        hold = Hold(key.id)
        if not limited(key):
            return hold, None
        with self._lock:
            m = self._minute(key.id, now)
            busy = self._in_flight.get(key.id, 0)
            reset = m.start + WINDOW_SECS - now
            refusal: tuple[str, str, float] | None = None
            if key.max_parallel_requests is not None and busy >= key.max_parallel_requests:
                refusal = ("max_parallel_requests",
                           f"{busy} requests of this key are in flight; "
                           f"max_parallel_requests is {key.max_parallel_requests}", 1.0)
            elif key.rpm_limit is not None and m.requests >= key.rpm_limit:
                refusal = ("rpm_limit", f"this key has made {m.requests} requests this "
                           f"minute; rpm_limit is {key.rpm_limit}", reset)
            elif key.tpm_limit is not None and m.tokens > 0 \
                    and m.tokens + tokens > key.tpm_limit:
                refusal = ("tpm_limit", f"this key has used {m.tokens} tokens this minute "
                           f"and this request may use {tokens} more; tpm_limit is "
                           f"{key.tpm_limit}", reset)
            if refusal is not None:
                limit, why, wait = refusal
                raise _refused(key, limit, why, wait, self._state(key, m, now))
            m.requests += 1
            if key.tpm_limit is not None:
                m.tokens += tokens
                hold.tokens = tokens
            hold.window = m.start
            if key.max_parallel_requests is not None:
                self._in_flight[key.id] = busy + 1
                hold.parallel = True
            return hold, self._state(key, m, now)

    def settle(self, hold: Hold, tokens: int | None) -> None:
        """Give back what ``hold`` took, once: its slot and its budget reservation;
        its minute's tokens become ``tokens`` (the used ones; None keeps the estimate)."""
        with self._lock:
            if hold.settled:
                return
            hold.settled = True
            key_id = hold.key_id
            if hold.usd and hold.period is not None and self.leases is not None:
                self.leases.unreserve(key_id, hold.period, hold.usd)
            if hold.usd:
                left_usd = self._reserved.get(key_id, 0.0) - hold.usd
                if left_usd > 1e-12:
                    self._reserved[key_id] = left_usd
                else:
                    self._reserved.pop(key_id, None)
            if hold.shared:
                delta = 0 if tokens is None else tokens - hold.tokens
                if self.leases is not None and (hold.parallel or delta):
                    self.leases.release_limits(key_id, window=hold.window, tokens=delta,
                                               parallel=hold.parallel)
                return
            if hold.parallel:
                left = self._in_flight.get(key_id, 1) - 1
                if left > 0:
                    self._in_flight[key_id] = left
                else:
                    self._in_flight.pop(key_id, None)
            m = self._minutes.get(key_id)
            if tokens is not None and m is not None and m.start == hold.window \
                    and (hold.tokens or tokens):
                m.tokens = max(0, m.tokens + tokens - hold.tokens)


def _shared_state(key: KeySpec, c: LimitCount, start: float, now: float) -> LimitState:
    return LimitState(rpm_limit=key.rpm_limit,
                      requests_left=max(0, (key.rpm_limit or 0) - c.requests),
                      tpm_limit=key.tpm_limit,
                      tokens_left=max(0, (key.tpm_limit or 0) - c.tokens),
                      parallel_limit=key.max_parallel_requests, in_flight=c.in_flight,
                      reset_at=start + WINDOW_SECS, now=now)


def _refused(key: KeySpec, limit: str, why: str, wait: float,
             state: LimitState) -> RateLimited:
    """The 429 for ``key``'s ``limit``, with the key's ``state`` for its headers.

    Made here and raised by the caller at once, so no frame of the request holds
    it in a variable: a frame that did (``err = ...; raise err``) would be held by
    the error's traceback in turn, a cycle per refused request that kept the whole
    request (its task, its call, uvicorn's cycle) for the garbage collector."""
    err = RateLimited(f"rate limit reached for key {key.id!r}: {why}; "
                      f"retry after {_ceil(wait)}s", limit=limit, retry_after=max(1.0, wait))
    err.state = state  # type: ignore[attr-defined]
    return err


def _ceil(secs: float) -> int:
    return max(1, math.ceil(secs - 1e-9))


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(secs: float) -> str:
    """OpenAI's reset format: ``1m0s``, ``7s``."""
    whole = _ceil(secs)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


def limit_headers(state: LimitState | None, protocol: str) -> dict[str, str]:
    """The rate-limit headers of an answer (or a refusal) for a limited key: OpenAI's
    ``x-ratelimit-*`` names, or Anthropic's ``anthropic-ratelimit-*`` on ``/v1/messages``.
    Only the configured limits are shown (requests for ``rpm_limit``, tokens for
    ``tpm_limit``)."""
    if state is None:
        return {}
    h: dict[str, str] = {}
    reset = state.reset_at - state.now
    if protocol == "anthropic":
        at = _rfc3339(state.reset_at)
        if state.rpm_limit is not None:
            h["anthropic-ratelimit-requests-limit"] = str(state.rpm_limit)
            h["anthropic-ratelimit-requests-remaining"] = str(state.requests_left)
            h["anthropic-ratelimit-requests-reset"] = at
        if state.tpm_limit is not None:
            h["anthropic-ratelimit-tokens-limit"] = str(state.tpm_limit)
            h["anthropic-ratelimit-tokens-remaining"] = str(state.tokens_left)
            h["anthropic-ratelimit-tokens-reset"] = at
        return h
    if state.rpm_limit is not None:
        h["x-ratelimit-limit-requests"] = str(state.rpm_limit)
        h["x-ratelimit-remaining-requests"] = str(state.requests_left)
        h["x-ratelimit-reset-requests"] = _duration(reset)
    if state.tpm_limit is not None:
        h["x-ratelimit-limit-tokens"] = str(state.tpm_limit)
        h["x-ratelimit-remaining-tokens"] = str(state.tokens_left)
        h["x-ratelimit-reset-tokens"] = _duration(reset)
    return h
