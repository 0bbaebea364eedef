"""Per-key limits across instances on DynamoDB: blocks of each minute, slots in flight.

One ``LimitBlocks`` per process (or Lambda instance) on a DynamoDB store, inside
its ``Leases``. On SQLite every admission is one transaction
(``limit_counters.CountedLimits``);
on DynamoDB a write per request to one item per key would heat it
(docs/decisions/0002), so an instance takes *blocks*:

- **Requests and tokens.** An instance that has no request (or too few tokens)
  left of its block for the current minute takes a new block with one
  conditional write on the key's limits item (``store/dynamodb_limits.py``):
  ``max(need, min(left / (2 × holders), BLOCK_FRACTION × limit))``, where
  ``left`` is what the minute still has for everyone and ``holders`` the
  instances that took blocks in it; when that does not fit, exactly the need.
  Its requests are counted from the block without a store call. A limit under
  20 (``rpm_limit``) makes blocks of one request: every admission is a write,
  and the limit is exact across instances. Blocks end with their minute.
- **Settled tokens** (the answer's usage against the estimate) are written to
  the minute they were counted in, batched per key: by the upkeep tick every
  second in a long-lived process; in a Lambda instance, which has no tick, by
  the end of a request at least ``SETTLE_SECS`` after the last write (on the
  background thread, drained before the instance may be frozen).
- **Slots** (``max_parallel_requests``): an instance holds slots in a lease on
  the item (``s_<instance>``, with an expiry renewed while held); a request
  uses a free one or takes one more with a conditional write. A slot freed by
  a request's end is kept for the next request until the next tick, which gives
  back every free slot (in Lambda: at once).

**Bound**: a limit is never exceeded across instances, except by the tokens a
request used beyond its estimate that are not yet written (at most about one
second's settling per instance; a Lambda instance frozen before its next
request keeps them until it thaws). An instance can be refused early by at
most the unused part of the other instances' blocks of the minute, and by
their free slots until their next tick (a dead instance's until its slot
lease expires).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from humpyard.clock import Clock
from humpyard.limit_counters import SHARED_LIMITS, CountedLimits, LimitCounter
from humpyard.store.sharing import LimitCount, LimitLease

log = logging.getLogger("humpyard.leases")

BLOCK_FRACTION = 0.1
"""A block is at most this share of a limit, so an instance strands little of a minute."""
SETTLE_SECS = 1.0
"""Settled tokens wait in the instance at most about this long (the upkeep's tick)."""
FORGET_SECS = 120.0
"""A key with nothing held or owed is forgotten this long after its minute began, so
an instance's memory follows the keys in use, not every key ever seen."""


@dataclass(slots=True)
class _Key:
    """One key's blocks and slots as this instance holds them."""

    window: float = -1.0  # the minute the blocks below belong to
    req_left: int = 0  # requests of this instance's blocks not used yet
    tok_left: int = 0  # tokens of this instance's blocks not used yet
    settle: int = 0  # tokens settled in ``window`` not written yet
    requests: int = 0  # handed out in the minute to every instance (last write)
    tokens: int = 0
    holders: int = 1
    slots: int = 0  # slots this instance holds
    busy: int = 0  # of them in use
    in_flight: int = 0  # slots every instance holds (last write)
    renewed: float = 0.0  # when this instance's slot lease was last written
    rpm_full: int | None = None  # the rpm_limit that refused in ``window``: final for
    # the minute (requests only grow), unless a reload changes the limit
    flushed: float = 0.0  # when settled tokens were last written


def block(limit: int, handed: int, holders: int, need: int) -> int:
    """The block to ask for: ``need`` at least, else half the room left per holder, at
    most ``BLOCK_FRACTION`` of the limit."""
    left = max(0, limit - handed)
    return max(need, min(left // (2 * max(1, holders)), max(1, int(limit * BLOCK_FRACTION))))


class LimitBlocks(LimitCounter):
    """This instance's blocks of its keys' minutes and its in-flight slots; see the
    module docstring. Its ``_lock`` guards the keys and is never held across a store
    call; with ``ticking`` the tick settles and gives back."""

    def __init__(self, store: Any, clock: Clock, instance: str, *, lease_secs: float,
                 later: Callable[..., None]) -> None:
        super().__init__(store, clock, instance, lease_secs=lease_secs, later=later)
        self._keys: dict[str, _Key] = {}
        self._io = threading.Lock()  # one store write at a time

    def _key(self, key_id: str, window: float) -> _Key:
        k = self._keys.get(key_id)
        if k is None:
            k = self._keys[key_id] = _Key()
        if window > k.window:  # a new minute: the blocks of the last one are gone
            k.window, k.req_left, k.tok_left, k.settle = window, 0, 0, 0
            k.requests, k.tokens, k.holders, k.rpm_full = 0, 0, 1, None
        return k

    @staticmethod
    def _needs(k: _Key, rpm: int | None, tpm: int | None, parallel: int | None,
               tokens: int) -> tuple[int, int, int]:
        return (1 if rpm is not None and k.req_left < 1 else 0,
                max(0, tokens - k.tok_left) if tpm is not None else 0,
                1 if parallel is not None and k.busy >= k.slots else 0)

    @staticmethod
    def _use(k: _Key, rpm: int | None, tpm: int | None, parallel: int | None,
             tokens: int) -> None:
        if rpm is not None:
            k.req_left -= 1
        if tpm is not None:
            k.tok_left -= tokens
        if parallel is not None:
            k.busy += 1

    @staticmethod
    def _count(k: _Key, refused: str | None) -> LimitCount:
        """The counts as this instance sees them: its unused blocks and free slots are
        not requests, tokens or requests in flight."""
        return LimitCount(refused, max(0, k.requests - k.req_left),
                          max(0, k.tokens + k.settle - k.tok_left),
                          max(0, k.in_flight - (k.slots - k.busy)))

    def take_now(self, key_id: str, *, window: float, rpm: int | None, tpm: int | None,
                 parallel: int | None, tokens: int) -> LimitCount | None:
        """Count one request from the blocks and slots held, or None: a store write is
        needed (``take``)."""
        with self._lock:
            k = self._key(key_id, window)
            need_r, need_t, need_s = self._needs(k, rpm, tpm, parallel, tokens)
            if need_r and k.rpm_full == rpm and not need_s:  # requests only grow
                return self._count(k, "rpm_limit")
            if need_r or need_t or need_s:
                return None
            self._use(k, rpm, tpm, parallel, tokens)
            return self._count(k, None)

    def take(self, key_id: str, *, window: float, rpm: int | None, tpm: int | None,
             parallel: int | None, tokens: int, now: float) -> LimitCount:
        """Count one request, taking a block or a slot first when needed (one store write),
        or name the limit that refuses it. Blocking: a worker thread's."""
        with self._io:
            with self._lock:
                k = self._key(key_id, window)
                need_r, need_t, need_s = self._needs(k, rpm, tpm, parallel, tokens)
                if not (need_r or need_t or need_s):  # another request's write brought it
                    self._use(k, rpm, tpm, parallel, tokens)
                    return self._count(k, None)
                want_r = block(rpm, k.requests, k.holders, need_r) if need_r and rpm else 0
                want_t = block(tpm, k.tokens, k.holders, need_t) if need_t and tpm else 0
            answer: LimitLease = self.store.lease_limits(
                key_id, self.instance, window=window, want=(want_r, want_t),
                need=(need_r, need_t), slots=need_s, rpm=rpm, tpm=tpm, parallel=parallel,
                now=now, expires_at=now + self.lease_secs)
            with self._lock:
                k = self._key(key_id, window)
                k.requests, k.tokens, k.holders = answer.requests, answer.tokens, answer.holders
                k.in_flight, k.slots = answer.in_flight, answer.slots
                if not answer.granted:
                    k.rpm_full = rpm if answer.refused == "rpm_limit" else None
                    return self._count(k, answer.refused)
                k.req_left += answer.got[0]
                k.tok_left += answer.got[1]
                if need_s:
                    k.renewed = now
                self._use(k, rpm, tpm, parallel, tokens)
                return self._count(k, None)

    def release(self, key_id: str, *, window: float, tokens: int, parallel: bool) -> None:
        """A request ended: its slot is free (kept until the next tick), ``tokens`` (used
        minus estimated) settle in ``window``."""
        now = self.clock.now()
        with self._lock:
            k = self._keys.get(key_id)
            if k is None:
                return
            if parallel and k.busy > 0:
                k.busy -= 1
            if tokens and k.window == window:
                k.settle += tokens
            # No tick comes in Lambda: a free slot is given back now (the instance may be
            # frozen with it), settled tokens once a second, off the loop.
            due = not self.ticking and (
                k.slots > k.busy or (k.settle and now - k.flushed >= SETTLE_SECS))
        if due:
            self._later(self.flush, key_id)

    def flush(self, key_id: str, *, all_slots: bool = False) -> None:
        """Write the key's settled tokens, give back its free slots (every slot with
        ``all_slots``) and renew its slot lease when due. Blocking."""
        now = self.clock.now()
        with self._io:
            with self._lock:
                k = self._keys.get(key_id)
                if k is None:
                    return
                tokens, window = k.settle, k.window
                spare = k.slots if all_slots else k.slots - k.busy
                renew = k.slots > 0 and now - k.renewed >= self.lease_secs / 3
                if not tokens and spare <= 0 and not renew:
                    return
                k.settle = 0
                k.slots -= max(0, spare)
            try:
                answer: LimitLease = self.store.settle_limits(
                    key_id, self.instance, window=window, tokens=tokens,
                    slots=-max(0, spare), now=now, expires_at=now + self.lease_secs)
            except Exception:
                with self._lock:
                    if k.window == window:
                        k.settle += tokens
                    k.slots += max(0, spare)
                raise
            with self._lock:
                k.flushed = now
                k.slots = answer.slots
                k.in_flight = answer.in_flight
                if k.window == window:
                    k.tokens = answer.tokens
                if k.slots:
                    k.renewed = now

    def tick(self) -> None:
        """Flush every key; forget keys with nothing held in a past minute. Blocking."""
        now = self.clock.now()
        with self._lock:
            keys = list(self._keys)
        for key_id in keys:
            try:
                self.flush(key_id)
            except Exception:  # noqa: BLE001 - upkeep must never stop the gateway
                log.exception("per-key limit upkeep failed for key %s", key_id)
            with self._lock:
                k = self._keys.get(key_id)
                if (k is not None and not k.slots and not k.settle
                        and k.window + FORGET_SECS < now):
                    del self._keys[key_id]

    def counts(self, key_id: str, *, window: float, now: float) -> LimitCount:
        """The key's counts across instances (explain): one strongly consistent read."""
        answer: LimitLease = self.store.read_limits(key_id, self.instance, window=window,
                                                    now=now)
        with self._lock:
            k = self._key(key_id, window)
            k.requests, k.tokens, k.in_flight = answer.requests, answer.tokens, answer.in_flight
            return self._count(k, None)

    def close(self) -> None:
        """Write settled tokens and give back every slot (shutdown). Blocking."""
        with self._lock:
            keys = list(self._keys)
        for key_id in keys:
            try:
                self.flush(key_id, all_slots=True)
            except Exception:  # noqa: BLE001 - the slot lease expires on its own
                log.exception("per-key limit slots of key %s could not be given back", key_id)


def limit_counter(store: Any, clock: Clock, instance: str, *, lease_secs: float,
                  later: Callable[..., None]) -> CountedLimits | LimitBlocks | None:
    """How ``store`` shares per-key limits across instances, or None (not shared):
    blocks on a store that leases them (DynamoDB), else a count per request (SQLite).
    Here rather than in ``limit_counters`` because it names both kinds, and
    ``limit_blocks`` builds on ``limit_counters``."""
    if getattr(store, "kind", "") not in SHARED_LIMITS:
        return None
    if callable(getattr(store, "lease_limits", None)):
        return LimitBlocks(store, clock, instance, lease_secs=lease_secs, later=later)
    if callable(getattr(store, "take_limits", None)):
        return CountedLimits(store, clock, instance, lease_secs=lease_secs, later=later)
    return None
