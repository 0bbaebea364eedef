"""``DynamoDBStore``'s per-key limit blocks: one ``limits#<key id>`` item per key.

The item holds the key's current fixed minute and what every instance has
been handed out of it, plus the in-flight slots each instance holds:

- ``w``: the minute's start; ``r`` and ``t``: the requests and tokens handed
  out in it (blocks included, settled tokens added); ``hw``: the instances
  that took a block in it (a string set, for the block size);
- ``sl``: the slots every instance holds together, and one ``s_<instance>`` =
  ``{n: slots held, e: expiry}`` per holder (``sl`` because a condition
  cannot add up the holders).

``lease_limits`` is one conditional ``UpdateItem``: add a block of requests
and tokens to the minute, only while ``r`` and ``t`` stay within ``rpm_limit``
and ``tpm_limit`` (a request larger than ``tpm_limit`` only into a minute with
no tokens yet), and change the instance's slots, only while ``sl`` stays
within ``max_parallel_requests``. The first write of a new minute resets it
(``w < minute``: a condition, so two instances cannot both reset it). When the
condition fails the item comes back with the failure
(``ReturnValuesOnConditionCheckFailure``: no read, and no read grant): a
minute that moved on is reset, a slot lease that is not what this instance
last wrote is taken as stored,
expired slot leases of other instances are reclaimed (one conditional write
each), a block that does not fit is asked again as exactly the need, and
otherwise the limit that refuses is named. ``settle_limits`` writes settled
tokens to the minute they were counted in and gives back or renews slots.

docs/decisions/0016-budget-reservations.md, "Limit blocks on DynamoDB", says
what this bounds and costs; ``limit_blocks.py`` is the instance's side.
"""

from __future__ import annotations

import re
from typing import Any

from humpyard.store.dynamodb_base import ConditionFailed, DynamoDBBase, N, as_float, as_int
from humpyard.store.dynamodb_keys import LIMITS_TTL_SECS, limits_key
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from humpyard.store.memory_leases import refusal
from humpyard.store.sharing import LimitLease

SLOT_PREFIX = "s_"
_ATTEMPTS = 8
_PLACEHOLDER = re.compile(r"[#:]\w+")

Item = dict[str, Any]


def _slot(item: Item, name: str) -> tuple[int, float] | None:
    value = item.get(name)
    if not isinstance(value, dict) or "M" not in value:
        return None
    return as_int(value["M"], "n"), as_float(value["M"], "e")


def _window(item: Item) -> float | None:
    return as_float(item, "w") if "w" in item else None


def _holders(item: Item) -> int:
    return max(1, len(item.get("hw", {}).get("SS", [])))


def _answer(item: Item, name: str, window: float, *, granted: bool,
            got: tuple[int, int] = (0, 0), refused: str | None = None) -> LimitLease:
    same = _window(item) == window
    mine = _slot(item, name)
    return LimitLease(granted=granted, got=got,
                      requests=as_int(item, "r") if same else 0,
                      tokens=as_int(item, "t") if same else 0,
                      in_flight=as_int(item, "sl"), slots=mine[0] if mine else 0,
                      holders=_holders(item) if same else 1, refused=refused)


class DynamoDBLimits(DynamoDBBase):
    """``lease_limits``, ``settle_limits`` and ``read_limits``; see the module docstring."""

    _slots_mine: dict[tuple[str, str], tuple[int, float] | None]
    """(key id, slot attribute) → this instance's slot lease as last written."""
    _minutes_seen: dict[str, float]
    """Key id → the latest minute seen on the key's item."""

    def _limits_state(self) -> None:
        """Set up what this instance knows of the limits items (called once from the
        constructor)."""
        self._slots_mine = {}
        self._minutes_seen = {}

    def lease_limits(self, key_id: str, instance: str, *, window: float,
                     want: tuple[int, int], need: tuple[int, int], slots: int,
                     rpm: int | None, tpm: int | None, parallel: int | None,
                     now: float, expires_at: float) -> LimitLease:
        """Add ``want`` (requests, tokens) to the key's ``window`` and ``slots`` (0 or
        more) to the instance's slots, under the limits; when ``want`` does not fit,
        ``need`` (at most ``want``); else add nothing and name the limit that refuses."""
        name = SLOT_PREFIX + instance
        mine, seen = self._slots_mine, self._minutes_seen
        ask = want
        fresh = seen.get(key_id, -1.0) < window  # a new minute, as far as this one knows
        for _ in range(_ATTEMPTS):
            old = mine.get((key_id, name))
            try:
                item = self._limits_update(key_id, name, old, window, fresh=fresh,
                                           requests=ask[0], tokens=ask[1], slots=slots,
                                           rpm=rpm, tpm=tpm, parallel=parallel,
                                           expires_at=expires_at)
            except ConditionFailed as failed:
                item = failed.item or {}  # ALL_OLD: nothing means no item yet
                stored_window = _window(item)
                stored = _slot(item, name)
                if stored_window is not None:
                    seen[key_id] = stored_window
                if stored != old:  # reclaimed by another, or unknown to this instance
                    mine[(key_id, name)] = stored
                    continue
                if stored_window is None or stored_window < window:
                    if not fresh:  # the minute is new: start it
                        fresh = True
                        continue
                    # a new minute's write failed on the slots: go on below
                elif fresh:  # another instance started the minute first
                    fresh = False
                    continue
                elif stored_window > window:  # another instance's clock is ahead: its minute
                    window = stored_window
                    continue
                if self._reclaim_expired(limits_key(key_id), item, prefix=SLOT_PREFIX,
                                         mine=name, total="sl", amount="n", now=now):
                    continue
                if ask != need:
                    ask = need
                    continue
                same = stored_window == window
                why = refusal(as_int(item, "r") if same else 0, as_int(item, "t") if same else 0,
                              as_int(item, "sl"),
                              rpm if need[0] else None, tpm if need[1] else None,
                              parallel if slots > 0 else None, need[1])
                if why is None:  # it fits now: another write came between
                    continue
                return _answer(item, name, window, granted=False, refused=why)
            mine[(key_id, name)] = _slot(item, name)
            seen[key_id] = window
            return _answer(item, name, window, granted=True, got=ask)
        raise ConditionFailed(None)

    def settle_limits(self, key_id: str, instance: str, *, window: float, tokens: int,
                      slots: int, now: float, expires_at: float) -> LimitLease:
        """Add ``tokens`` (negative: given back) to ``window`` when it is still the key's
        minute, change the instance's slots by ``slots`` (negative: given back; 0 renews
        the lease to ``expires_at``). No limit is checked."""
        name = SLOT_PREFIX + instance
        mine = self._slots_mine
        for _ in range(_ATTEMPTS):
            old = mine.get((key_id, name))
            if not tokens and old is None and slots <= 0:
                return LimitLease(granted=True, got=(0, 0), requests=0, tokens=0,
                                  in_flight=0, slots=0, holders=1)
            if old is None:
                slots = max(0, slots)
            else:
                slots = max(slots, -old[0])
            try:
                item = self._settle_update(key_id, name, old, window, tokens=tokens,
                                           slots=slots, expires_at=expires_at)
            except ConditionFailed as failed:
                item = failed.item or {}
                stored = _slot(item, name)
                if stored != old:
                    mine[(key_id, name)] = stored
                    continue
                tokens = 0  # the minute moved on: the settled tokens no longer count
                continue
            mine[(key_id, name)] = _slot(item, name)
            return _answer(item, name, window, granted=True)
        raise ConditionFailed(None)

    def read_limits(self, key_id: str, instance: str, *, window: float,
                    now: float) -> LimitLease:
        """The key's counters (strongly consistent); ``in_flight`` counts live slots."""
        item = self._limits_item(key_id)
        live = sum(s[0] for n in item if n.startswith(SLOT_PREFIX)
                   if (s := _slot(item, n)) is not None and s[1] > now)
        answer = _answer(item, SLOT_PREFIX + instance, window, granted=True)
        return LimitLease(granted=True, got=(0, 0), requests=answer.requests,
                          tokens=answer.tokens, in_flight=live, slots=answer.slots,
                          holders=answer.holders)

    # -- the writes -------------------------------------------------------------------

    def _limits_update(self, key_id: str, name: str, old: tuple[int, float] | None,
                       window: float, *, fresh: bool, requests: int, tokens: int,
                       slots: int, rpm: int | None, tpm: int | None, parallel: int | None,
                       expires_at: float) -> Item:
        names = {"#w": "w", "#r": "r", "#t": "t", "#h": "hw", "#ttl": TTL_ATTRIBUTE}
        values: dict[str, Any] = {":w": N(window), ":dr": N(requests), ":dt": N(tokens),
                                  ":ttl": N(int(self._clock.now() + LIMITS_TTL_SECS))}
        sets = ["#ttl = :ttl"]
        adds: list[str] = []
        removes: list[str] = []
        conditions: list[str] = []
        block = requests > 0 or tokens > 0
        if fresh:  # the first write of a new minute starts it
            sets += ["#w = :w", "#r = :dr", "#t = :dt"]
            if block:
                sets.append("#h = :me")
            else:
                removes.append("#h")
            conditions.append("(attribute_not_exists(#w) OR #w < :w)")
        else:
            sets += ["#r = #r + :dr", "#t = #t + :dt"]
            if block:
                adds.append("#h :me")
            conditions.append("#w = :w")
            if requests > 0 and rpm is not None:
                conditions.append("#r <= :rmax")
                values[":rmax"] = N(rpm - requests)
            if tokens > 0 and tpm is not None:
                conditions.append("(#t <= :z OR #t <= :tmax)")
                values[":z"] = N(0)
                values[":tmax"] = N(tpm - tokens)
        if block:
            values[":me"] = {"SS": [name[len(SLOT_PREFIX):]]}
        if slots:
            self._slot_change(names, values, sets, removes, conditions, name, old, slots,
                              expires_at)
            if slots > 0 and parallel is not None:
                conditions.append("(attribute_not_exists(#sl) OR #sl <= :smax)")
                values[":smax"] = N(parallel - slots)
        return self._update(key_id, names, values, sets, adds, removes, conditions)

    def _settle_update(self, key_id: str, name: str, old: tuple[int, float] | None,
                       window: float, *, tokens: int, slots: int, expires_at: float) -> Item:
        names = {"#ttl": TTL_ATTRIBUTE}
        values: dict[str, Any] = {":ttl": N(int(self._clock.now() + LIMITS_TTL_SECS))}
        sets = ["#ttl = :ttl"]
        removes: list[str] = []
        conditions: list[str] = []
        if tokens:
            names.update({"#w": "w", "#t": "t"})
            values.update({":w": N(window), ":dt": N(tokens)})
            sets.append("#t = #t + :dt")
            conditions.append("#w = :w")
        if old is not None or slots > 0:
            self._slot_change(names, values, sets, removes, conditions, name, old, slots,
                              expires_at)
        return self._update(key_id, names, values, sets, [], removes, conditions)

    @staticmethod
    def _slot_change(names: dict[str, str], values: dict[str, Any], sets: list[str],
                     removes: list[str], conditions: list[str], name: str,
                     old: tuple[int, float] | None, slots: int, expires_at: float) -> None:
        held = max(0, (old[0] if old else 0) + slots)
        names.update({"#sl": "sl", "#s": name})
        values.update({":ds": N(held - (old[0] if old else 0)), ":zs": N(0)})
        sets.append("#sl = if_not_exists(#sl, :zs) + :ds")
        if held > 0:
            sets.append("#s = :lease")
            values[":lease"] = {"M": {"n": N(held), "e": N(expires_at)}}
        else:
            removes.append("#s")
        if old is None:
            conditions.append("attribute_not_exists(#s)")
        else:
            conditions.append("#s.e = :olde")
            values[":olde"] = N(old[1])

    def _update(self, key_id: str, names: dict[str, str], values: dict[str, Any],
                sets: list[str], adds: list[str], removes: list[str],
                conditions: list[str]) -> Item:
        update = "SET " + ", ".join(sets)
        if adds:
            update += " ADD " + ", ".join(adds)
        if removes:
            update += " REMOVE " + ", ".join(removes)
        kw: dict[str, Any] = {}
        if conditions:
            kw["ConditionExpression"] = " AND ".join(conditions)
        text = update + " " + kw.get("ConditionExpression", "")
        used = set(_PLACEHOLDER.findall(text))  # DynamoDB refuses unused placeholders
        answer = self._call(
            "update_item", TableName=self.state_table, Key=limits_key(key_id),
            UpdateExpression=update,
            ExpressionAttributeNames={k: v for k, v in names.items() if k in used},
            ExpressionAttributeValues={k: v for k, v in values.items() if k in used},
            ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD", **kw)
        return dict(answer.get("Attributes", {}))

    def _limits_item(self, key_id: str) -> Item:
        """The key's item, strongly consistent (a ``BatchGetItem`` of one: the read the
        functions' role grants on the state it shares, docs/decisions/0002)."""
        found = self._batch_get(self.state_table, [limits_key(key_id)])
        return dict(found[0]) if found else {}
