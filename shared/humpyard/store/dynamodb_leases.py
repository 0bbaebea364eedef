"""``DynamoDBStore``'s budget leases: on the key's ``spend#<key id>`` / period item.

The item that holds a key's spend in a period (``usd``) also holds
``committed`` (spend plus every lease, so one condition can check the
budget: DynamoDB conditions compare, they do not add) and one attribute per
instance holding a lease, ``l_<instance>`` = ``{h: USD held, e: expiry}``.

A lease write is one ``UpdateItem``: add the instance's pending spend to
``usd``, move ``committed`` by that spend plus the change of the lease, set
(or remove) ``l_<instance>``, under the condition that the instance's lease is
still the one it last wrote (``l_<instance>.e``, so a lease another instance
reclaimed is never written over) and, when more is wanted, ``committed <=
usd − the change`` (the budget). When the condition fails the stored item
comes back with the failure: a lease that is not what this instance thought
is taken as stored and the write retried; expired leases of other instances
are reclaimed (one conditional ``UpdateItem`` each: ``REMOVE`` and
``committed −= held``) and the write retried; otherwise the budget has no
room and the spend and lease are written without the slice. The item read is
the one the failed write returns (``ReturnValuesOnConditionCheckFailure``): the
functions' role grants no ``GetItem`` on the state table.

Store traffic: one write per slice taken and per flush of pending spend
(every ``leases.FLUSH_SECS["dynamodb"]`` per busy instance), never per
request. The item grows by ~30 bytes per instance holding a lease.
"""

from __future__ import annotations

from typing import Any

from humpyard.store.dynamodb_base import ConditionFailed, DynamoDBBase, N, as_float
from humpyard.store.dynamodb_keys import SPEND_TTL_SECS, spend_key
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from humpyard.store.rows import check_usd
from humpyard.store.sharing import LeaseAnswer

LEASE_PREFIX = "l_"
_ATTEMPTS = 4


def _lease(item: dict[str, Any], name: str) -> tuple[float, float] | None:
    value = item.get(name)
    if not isinstance(value, dict) or "M" not in value:
        return None
    m = value["M"]
    return as_float(m, "h"), as_float(m, "e")


def _holders(item: dict[str, Any], now: float) -> int:
    return sum(1 for name in item if name.startswith(LEASE_PREFIX)
               and (_lease(item, name) or (0.0, 0.0))[1] > now)


class DynamoDBLeases(DynamoDBBase):
    """``lease_budget`` on the spend item; see the module docstring."""

    _leases_mine: dict[tuple[str, str, str], tuple[float, float] | None]
    """(key id, period, lease attribute) → this instance's lease as last written."""

    def _leases_state(self) -> None:
        """Set up what this instance knows of its leases (called once from the constructor)."""
        self._leases_mine = {}

    def lease_budget(self, key_id: str, period: str, instance: str, *, limit: float,
                     spent: float, held: float, want: float, now: float,
                     expires_at: float, keep: float = 0.0) -> LeaseAnswer:
        spent = check_usd(spent)
        held = max(0.0, held)
        mine = self._leases_mine
        name = LEASE_PREFIX + instance
        for _ in range(_ATTEMPTS):
            old = mine.get((key_id, period, name))
            try:
                item = self._lease_write(key_id, period, name, old, limit - keep, spent,
                                         held + want if want > 0 else held, want > 0,
                                         expires_at)
            except ConditionFailed as failed:
                item = failed.item or {}  # ALL_OLD: nothing means the item is gone
                stored = _lease(item, name)
                if stored != old:  # reclaimed by another, or unknown to this instance
                    mine[(key_id, period, name)] = stored
                    if stored is None:  # what it held no longer counts for anyone
                        held = 0.0
                    continue
                if self._reclaim_expired(spend_key(key_id, period), item, prefix=LEASE_PREFIX,
                                         mine=name, total="committed", amount="h", now=now):
                    continue
                if want <= 0:
                    continue
                want = 0.0  # no room: write the spend and the lease as they are
                continue
            lease = _lease(item, name)
            mine[(key_id, period, name)] = lease
            return LeaseAnswer(granted=want > 0, held=lease[0] if lease else 0.0,
                               committed=as_float(item, "committed"),
                               holders=_holders(item, now))
        raise ConditionFailed(None)

    def _lease_write(self, key_id: str, period: str, name: str,
                     old: tuple[float, float] | None, limit: float, spent: float,
                     new_held: float, check: bool, expires_at: float) -> dict[str, Any]:
        change = round(spent + new_held - (old[0] if old else 0.0), 12)
        names = {"#u": "usd", "#c": "committed", "#l": name, "#ttl": TTL_ATTRIBUTE}
        values: dict[str, Any] = {
            ":z": N(0), ":s": N(spent), ":d": N(change),
            ":ttl": N(int(self._clock.now() + SPEND_TTL_SECS))}
        update = "SET #u = if_not_exists(#u, :z) + :s, #c = if_not_exists(#c, :z) + :d, " \
                 "#ttl = :ttl"
        if new_held > 0:
            update += ", #l = :lease"
            values[":lease"] = {"M": {"h": N(new_held), "e": N(expires_at)}}
        else:
            update += " REMOVE #l"
        conditions = []
        if old is None:
            conditions.append("attribute_not_exists(#l)")
        else:
            conditions.append("#l.e = :olde")
            values[":olde"] = N(old[1])
        if check:
            conditions.append("(attribute_not_exists(#c) OR #c <= :max)")
            values[":max"] = N(round(limit - change, 12) + 1e-12)
        answer = self._call(
            "update_item", TableName=self.state_table, Key=spend_key(key_id, period),
            UpdateExpression=update, ConditionExpression=" AND ".join(conditions),
            ExpressionAttributeNames=names, ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD")
        return dict(answer.get("Attributes", {}))
