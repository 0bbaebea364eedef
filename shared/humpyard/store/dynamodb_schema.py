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

Ledger table (``HUMPYARD_LEDGER_TABLE``; point-in-time recovery on), no index:

======================================  ======================================  ================
pk                                      sk                                      holds
======================================  ======================================  ================
``decision#<YYYY-MM-DD>#<shard>``       ``<time key>#<request id>``             a decision
``quotahist``                           time key                                quota history
``quotalast``                           ``["provider","window"]``               newest sample
``audit``                               time key                                override audit
======================================  ======================================  ================

A decision is keyed by its request id alone (``dynamodb_ledger``): the day and
the 16-hex time key are the time the id carries (``records.request_time``),
or the decision's ``ts`` for an id that carries none; the shard is
``crc32(request id) % DECISION_SHARDS``. Listing queries a day's shards and
filters on ``route``, ``rule``, ``outcome`` and ``key_id``, attributes of the
item. ``LEGACY_INDEXES`` are the five GSIs of the previous layout: nothing
reads or writes them; the template declares as many of them as its
``LedgerLegacyIndexes`` parameter says, so an existing stack sheds them one
per deploy (docs/deploy.md, "Upgrading the ledger layout").
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

TTL_ATTRIBUTE = "ttl"

LEGACY_INDEXES = ("by_day", "by_rule", "by_outcome", "by_route", "by_key")
"""The previous layout's GSIs, in the template's order (ADR 0019): no longer written or read."""

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
    "AttributeDefinitions": _KEY_TYPES,
    "BillingMode": "PAY_PER_REQUEST",
}
"""``CreateTable`` arguments of the ledger table (add ``TableName``): no index."""


def create_tables(client: Any, state_table: str, ledger_table: str) -> None:
    """Create both tables (on-demand), wait until active, then turn on TTL and PITR.

    Point-in-time recovery is turned on for both tables, as ``template.yaml`` does,
    whether just created or not; a table that already exists is otherwise left as
    it is, so this is safe to re-run against a local emulator. For tests and local
    stacks; on AWS the SAM template creates the same tables.
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
    for name in (state_table, ledger_table):  # as template.yaml: both
        client.update_continuous_backups(
            TableName=name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
