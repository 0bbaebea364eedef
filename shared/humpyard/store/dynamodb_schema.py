"""The two DynamoDB tables: their key schema, indexes and TTL, and ``create_tables``.

``template.yaml`` must declare exactly what ``STATE_TABLE`` and
``LEDGER_TABLE`` say (``docs/decisions/0002-dynamodb-layout.md`` has the
whole layout, why it is so, and what each request writes). Both tables are
on-demand, keyed by ``pk`` (S, HASH) and ``sk`` (S, RANGE), with TTL on the
number attribute ``ttl``.

State table (``HUMPYARD_STATE_TABLE``; point-in-time recovery on):

======================  =========================  ==========================================
pk                      sk                         holds
======================  =========================  ==========================================
``live``                ``live``                   every breaker (``b:<endpoint>`` JSON and
                                                   ``v:<endpoint>`` version) and ``ov``, the
                                                   overrides' version
``latency#<shard>``     bucket (12 digits)         ``n:<target>``, ``ms:<target>``
``override``            override id                ``body``, ``created_at``, ``expires_at``,
                                                   ``seq``, ``expiry_audited``
``counter``             ``override``               ``next_id``, ``seq``
``quota``               provider                   ``body``
``stats#<dim>#<shard>`` ``<hour>#<group key>``     counters and histogram ``h<i>``
``spend#<key id>``      period label               ``usd``
======================  =========================  ==========================================

Ledger table (``HUMPYARD_LEDGER_TABLE``): decisions (``decision#<request id>``
/ ``decision``), quota history (``quotahist`` / time key), the newest
sample per window (``quotalast`` / ``["provider","window"]``) and the
override audit (``audit`` / time key). A decision carries the keys of two
sparse GSIs (``TIME_INDEX`` and ``ROUTE_INDEX``), both sorted on ``g_sk`` =
``<ts as 16 sortable hex digits>#<request id>`` and projecting (INCLUDE)
``ts``, ``route``, ``rule``, ``outcome``, ``key_id`` so filters are
evaluated in the index; bodies come from the table. ``by_rule``,
``by_outcome`` and ``by_key`` are declared but no longer written (a sparse
GSI without entries costs nothing); they go when the template drops them.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

TTL_ATTRIBUTE = "ttl"
SORT_ATTRIBUTE = "g_sk"
INDEX_PROJECTION = ("ts", "route", "rule", "outcome", "key_id")

TIME_INDEX = ("by_day", "g_all")
"""(GSI, partition attribute) of every decision: ``<YYYY-MM-DD>#<ok|x>#<shard>``."""
ROUTE_INDEX = ("by_route", "g_route")
"""(GSI, partition attribute) of decisions with a route: ``<route>#<YYYY-MM-DD>#<shard>``."""
RETIRED_INDEXES = (("by_rule", "g_rule"), ("by_outcome", "g_outcome"), ("by_key", "g_key"))
"""Declared for the template's sake, never written since the sharded layout."""

DECISION_INDEXES: tuple[tuple[str, str], ...] = (TIME_INDEX, RETIRED_INDEXES[0],
                                                 RETIRED_INDEXES[1], ROUTE_INDEX,
                                                 RETIRED_INDEXES[2])
"""Every GSI of the ledger table as (name, partition attribute), in declaration order."""

_KEYS = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
_KEY_TYPES = [{"AttributeName": "pk", "AttributeType": "S"},
              {"AttributeName": "sk", "AttributeType": "S"}]

STATE_TABLE: dict[str, Any] = {
    "KeySchema": _KEYS,
    "AttributeDefinitions": _KEY_TYPES,
    "BillingMode": "PAY_PER_REQUEST",
}
"""``CreateTable`` arguments of the state table (add ``TableName``)."""

LEDGER_TABLE: dict[str, Any] = {
    "KeySchema": _KEYS,
    "AttributeDefinitions": [*_KEY_TYPES, {"AttributeName": SORT_ATTRIBUTE, "AttributeType": "S"},
                             *({"AttributeName": attr, "AttributeType": "S"}
                               for _, attr in DECISION_INDEXES)],
    "GlobalSecondaryIndexes": [
        {"IndexName": name,
         "KeySchema": [{"AttributeName": attr, "KeyType": "HASH"},
                       {"AttributeName": SORT_ATTRIBUTE, "KeyType": "RANGE"}],
         "Projection": {"ProjectionType": "INCLUDE",
                        "NonKeyAttributes": list(INDEX_PROJECTION)}}
        for name, attr in DECISION_INDEXES],
    "BillingMode": "PAY_PER_REQUEST",
}
"""``CreateTable`` arguments of the ledger table (add ``TableName``)."""


def create_tables(client: Any, state_table: str, ledger_table: str) -> None:
    """Create both tables (on-demand), wait until active, then turn on TTL and PITR.

    A table that already exists is left as it is, so this is safe to re-run
    against a local emulator. For tests and local stacks; on AWS the SAM
    template creates the same tables.
    """
    for name, spec in ((state_table, STATE_TABLE), (ledger_table, LEDGER_TABLE)):
        try:
            client.create_table(TableName=name, **spec)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise
            continue
        client.get_waiter("table_exists").wait(TableName=name)
        client.update_time_to_live(TableName=name, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": TTL_ATTRIBUTE})
    client.update_continuous_backups(
        TableName=state_table,
        PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
