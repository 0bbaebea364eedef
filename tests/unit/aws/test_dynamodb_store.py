"""What only the DynamoDB backend promises: its layout, its calls, retries and number types.

The behaviour every store shares is in ``tests/contract``; here the boto3
client is the seam (moto behind counting, recording and failing proxies).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from humpyard.clock import FakeClock, SystemClock
from humpyard.errors import ConflictError, StoreError
from humpyard.planning.types import Override
from humpyard.records import new_request_id
from humpyard.store.base import LedgerBatch
from humpyard.store.dynamodb import DynamoDBStore, create_tables
from humpyard.store.dynamodb_base import blocking_sleep, ts_key
from humpyard.store.dynamodb_batched import BatchedDynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter, count_calls
from humpyard.store.dynamodb_keys import DECISION_SHARDS, decision_key, shard_of
from humpyard.store.dynamodb_ledger import LIST_EXAMINED_ITEMS, LedgerWriteError
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from humpyard.store.dynamodb_stats import STATS_SHARDS
from tests.unit.aws.moto_support import LEDGER, STATE, Failing, Recorder

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC, FakeClock's start
DAY = 86_400.0


def decision(rid: str, ts: float, **fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "request_id": rid, "ts": ts, "route": "auto", "rule": "default", "outcome": "ok",
        "key_id": "ci", "status": 200, "target": "cheap", "provider": "local",
        "latency_ms": 120.0, "cost_usd": 0.01, "usage": {"input_tokens": 9, "output_tokens": 5},
        "attempts": [{"target": "cheap", "provider": "local", "status": 200,
                      "failure_class": None, "latency_ms": 120.0}],
    }
    d.update(fields)
    return d


def no_decimals(value: Any) -> bool:
    if isinstance(value, Decimal):
        return False
    if isinstance(value, dict):
        return all(no_decimals(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(no_decimals(v) for v in value)
    return True


# -- layout ----------------------------------------------------------------------------


def test_create_tables_builds_the_documented_layout(client: Any) -> None:
    ledger = client.describe_table(TableName=LEDGER)["Table"]
    assert ledger["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert [(k["AttributeName"], k["KeyType"]) for k in ledger["KeySchema"]] == [
        ("pk", "HASH"), ("sk", "RANGE")]
    assert not ledger.get("GlobalSecondaryIndexes")  # a decision is one item (ADR 0019)
    for table in (STATE, LEDGER):
        ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    create_tables(client, STATE, LEDGER)  # again: existing tables are left alone


def test_create_tables_turns_on_point_in_time_recovery_on_both_tables(client: Any) -> None:
    """As ``template.yaml`` does. Before: the state table only."""
    for table in (STATE, LEDGER):
        backups = client.describe_continuous_backups(TableName=table)
        pitr = backups["ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]
        assert pitr["PointInTimeRecoveryStatus"] == "ENABLED", table


def test_a_decision_is_one_conditional_put_and_its_stats_wait(store: DynamoDBStore,
                                                               counted: CallCounter) -> None:
    rid = new_request_id(T0)
    store.append_decision(decision(rid, T0))
    assert counted.delta() == {"PutItem": 1}
    with pytest.raises(ConflictError):
        store.append_decision(decision(rid, T0 + 1, route="other"))  # the same key
    assert counted.delta() == {"PutItem": 1}
    assert [g["requests"] for g in store.stats("route", T0, T0 + 3600)] == [1]  # pending
    counted.delta()
    assert store.get_decision(rid) == decision(rid, T0)
    assert counted.delta() == {"GetItem": 1}  # the id says where it is


def test_stats_are_summed_in_the_instance_and_flushed_as_one_add_per_group(
        client: Any, clock: FakeClock) -> None:
    writer_calls = count_calls(client)
    writer = DynamoDBStore(STATE, LEDGER, clock=clock, client=writer_calls)
    reader = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
    for i in range(30):
        clock.advance(1.0)
        writer.append_decision(decision(new_request_id(T0 + i), T0 + i, latency_ms=100.0 + i))
    assert writer_calls.delta() == {"PutItem": 30}  # 30 s: no flush due yet
    assert reader.stats("route", T0, T0 + 3600) == []  # not flushed: this instance only
    assert writer.stats("route", T0, T0 + 3600)[0]["requests"] == 30
    writer_calls.delta()

    clock.advance(30.0)
    writer.append_decision(decision(new_request_id(T0 + 30), T0 + 30))
    # route, key, target, provider of one hour, and the key's route, target and
    # provider (aggregates.SCOPED): seven ADDs for 31 decisions
    assert writer_calls.delta() == {"PutItem": 1, "UpdateItem": 7}
    [row] = reader.stats("route", T0, T0 + 3600)
    assert row["requests"] == 31 and row["cost_usd"] == pytest.approx(0.31)
    assert reader.stats("route", T0, T0 + 3600) == writer.stats("route", T0, T0 + 3600)
    writer_calls.delta()

    writer.append_decision(decision(new_request_id(T0 + 31), T0 + 31))
    writer.close()  # the instance's last flush
    assert writer_calls.delta() == {"PutItem": 1, "UpdateItem": 7}
    assert reader.stats("key", T0, T0 + 3600)[0]["requests"] == 32


def test_with_no_flush_interval_stats_are_written_with_each_decision(
        client: Any, clock: FakeClock) -> None:
    counted = count_calls(client)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counted, stats_flush_secs=0)
    store.append_decision(decision(new_request_id(T0), T0))
    assert counted.delta() == {"PutItem": 1, "UpdateItem": 7}
    assert store.pending_stats == 0


def test_stats_items_spread_over_shards(client: Any, clock: FakeClock) -> None:
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=client, stats_flush_secs=0)
    for i in range(40):
        store.append_decision(decision(f"r{i}", T0 + i))
    pks = {i["pk"]["S"] for i in client.scan(TableName=STATE)["Items"]
           if i["pk"]["S"].startswith("stats#route#")}
    assert pks == {f"stats#route#{s}" for s in range(STATS_SHARDS)}
    assert store.stats("route", T0, T0 + 3600)[0]["requests"] == 40


def test_a_failed_stats_flush_keeps_them_for_the_next(client: Any, clock: FakeClock) -> None:
    failing = Failing(client, times=4, operations=frozenset({"UpdateItem"}))
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=failing, stats_flush_secs=0)
    store.append_decision(decision("r1", T0))  # logged, not raised: the decision is written
    assert store.pending_stats == 7  # the four groups and the key's three scoped ones
    store.append_decision(decision("r2", T0 + 1))
    assert store.pending_stats == 0
    reader = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
    assert reader.stats("route", T0, T0 + 3600)[0]["requests"] == 2


# -- write_batch -------------------------------------------------------------------------


def test_write_batch_puts_each_decision_once_and_adds_spend(store: DynamoDBStore,
                                                            counted: CallCounter) -> None:
    a, b, c = (new_request_id(T0 + i) for i in range(3))
    store.write_batch(LedgerBatch([decision(a, T0), decision(b, T0 + 1)],
                                  {("ci", "day:x"): 0.25, ("ops", "day:x"): 1.0}))
    assert counted.delta() == {"PutItem": 2, "UpdateItem": 2}
    store.write_batch(LedgerBatch([decision(a, T0), decision(c, T0 + 2)],
                                  {("ci", "day:x"): 0.5}))
    assert counted.delta() == {"PutItem": 2, "UpdateItem": 1}  # a's put refused, no read
    assert store.get_spend("ci", "day:x") == 0.75
    assert store.stats("route", T0, T0 + 3600)[0]["requests"] == 3  # a counted once
    assert [d["request_id"] for d in store.list_decisions()[0]] == [c, b, a]


def test_write_batch_says_what_it_could_not_write(client: Any, clock: FakeClock) -> None:
    failing = Failing(client, times=4, operations=frozenset({"UpdateItem"}))
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=failing)
    with pytest.raises(LedgerWriteError) as err:
        store.write_batch(LedgerBatch([decision("a", T0)], {("ci", "day:x"): 0.25}))
    assert err.value.unwritten == LedgerBatch([], {("ci", "day:x"): 0.25})
    assert isinstance(err.value, StoreError)
    assert store.get_decision("a") is not None


def test_a_bad_decision_refuses_the_batch_before_any_write(store: DynamoDBStore,
                                                           counted: CallCounter) -> None:
    with pytest.raises(ValueError):
        store.write_batch(LedgerBatch([decision("a", T0), {"ts": T0}]))
    assert counted.total == 0


def test_spend_is_one_atomic_add(store: DynamoDBStore, counted: CallCounter) -> None:
    assert store.add_spend("ci", "day:2027-01-15", 0.5) == 0.5
    assert counted.delta() == {"UpdateItem": 1}
    assert store.spend_for({"ci": "day:2027-01-15", "ops": "day:2027-01-15"}) == {
        "ci": 0.5, "ops": 0.0}
    assert counted.delta() == {"BatchGetItem": 1}


# -- the query paths: the table's own keys, never a scan, never an index -------------------


def _recorded_store(client: Any, clock: FakeClock) -> tuple[DynamoDBStore, Recorder]:
    recorder = Recorder(client)
    return DynamoDBStore(STATE, LEDGER, clock=clock, client=recorder), recorder


def _partitions(rec: Recorder) -> list[str]:
    return [kw["ExpressionAttributeValues"][":p"]["S"] for op, kw in rec.calls if op == "Query"]


def test_every_listing_queries_the_day_shards_and_filters_there(
        client: Any, clock: FakeClock) -> None:
    store, rec = _recorded_store(client, clock)
    for i in range(6):
        store.append_decision(decision(f"r{i}", T0 + i, rule="deep" if i % 2 else "default",
                                       outcome="failed" if i % 3 == 0 else "ok",
                                       route="r" if i < 3 else "s", key_id=f"k{i % 2}"))
    today = [f"decision#2027-01-15#{n}" for n in range(DECISION_SHARDS)]
    cases: list[tuple[dict[str, str], list[str]]] = [
        ({"route": "s"}, ["r5", "r4", "r3"]),
        ({"outcome": "failed"}, ["r3", "r0"]),
        ({"outcome": "ok"}, ["r5", "r4", "r2", "r1"]),
        ({"rule": "deep"}, ["r5", "r3", "r1"]),
        ({"key_id": "k0"}, ["r4", "r2", "r0"]),
        ({"rule": "deep", "outcome": "failed"}, ["r3"]),
        ({"route": "r", "key_id": "k1"}, ["r1"]),
        ({}, ["r5", "r4", "r3", "r2", "r1", "r0"]),
    ]
    for filters, expected in cases:
        rec.calls.clear()
        page, cursor = store.list_decisions(**filters)  # type: ignore[arg-type]
        assert [d["request_id"] for d in page] == expected and cursor is None, filters
        assert set(rec.operations()) == {"Query"}  # bodies come with the listing
        queries = [kw for op, kw in rec.calls if op == "Query"]
        assert all("IndexName" not in q and q["ConsistentRead"] for q in queries)
        assert all(("FilterExpression" in q) == bool(filters) for q in queries)
        # today's shards, then the earlier days' (nothing was found there)
        assert _partitions(rec)[:DECISION_SHARDS] == today


def test_a_decision_is_one_small_item_keyed_by_its_id(store: DynamoDBStore,
                                                       client: Any) -> None:
    rid = new_request_id(T0)
    d = decision(rid, T0, key_id=None, note="x" * 300)
    store.append_decision(d)
    key = decision_key(rid, T0)
    assert key == {"pk": {"S": f"decision#2027-01-15#{shard_of(rid)}"},
                   "sk": {"S": f"{ts_key(T0)}#{rid}"}}
    item = client.get_item(TableName=LEDGER, Key=key)["Item"]
    assert int(item[TTL_ATTRIBUTE]["N"]) == int(T0 + 30 * DAY)
    assert set(item) == {"pk", "sk", TTL_ATTRIBUTE, "route", "rule", "outcome", "bodyz"}
    assert len(item["bodyz"]["B"]) < len(json.dumps(d))  # compressed
    assert item_size(item) <= 1024
    assert store.get_decision(rid) == d


def test_the_key_is_the_time_the_id_carries_whatever_the_ts(store: DynamoDBStore,
                                                             counted: CallCounter) -> None:
    # An id issued by another clock (a day earlier): found with one GetItem all the same.
    rid = new_request_id(T0 - DAY)
    store.append_decision(decision(rid, T0))
    counted.delta()
    assert store.get_decision(rid) == decision(rid, T0)
    assert counted.delta() == {"GetItem": 1}
    assert store.get_decision(new_request_id(T0)) is None  # a miss: one GetItem too
    assert counted.delta() == {"GetItem": 1}


def test_an_id_without_its_time_is_walked_for_within_a_bound(
        store: DynamoDBStore, counted: CallCounter) -> None:
    store.append_decision(decision("r1", T0))
    counted.delta()
    assert store.get_decision("r1") == decision("r1", T0)
    calls = counted.delta()
    assert calls["GetItem"] == 1 and calls["Query"] >= 1  # the previous layout's key first
    with pytest.raises(ConflictError):
        store.append_decision(decision("r1", T0 + 5))
    assert store.get_decision("nope") is None
    assert counted.delta()["Query"] <= 35  # one query per day of retention, at most


def test_a_decision_of_the_previous_layout_is_read_by_id(store: DynamoDBStore,
                                                          client: Any) -> None:
    old = {"request_id": "req_0a1b2c3d4e5f000000000001", "ts": T0, "status": 200}
    client.put_item(TableName=LEDGER, Item={
        "pk": {"S": f"decision#{old['request_id']}"}, "sk": {"S": "decision"},
        "body": {"S": json.dumps(old)}, "g_all": {"S": "2027-01-15#ok#0"}})
    assert store.get_decision(old["request_id"]) == old


def test_a_rare_filter_reads_a_bounded_page_and_says_where_it_stopped(
        client: Any, clock: FakeClock) -> None:
    store, rec = _recorded_store(client, clock)
    many = LIST_EXAMINED_ITEMS + 600
    rare = {many - 1, 2, 1}  # the newest decision, and two near the oldest
    # Written by ``humpyard serve``'s store (the same items, 25 a BatchWriteItem): one
    # conditional put each made this test three times as long on moto.
    writer = BatchedDynamoDBStore(STATE, LEDGER, clock=clock, client=client)
    made = [decision(new_request_id(T0 + i), T0 + i, key_id="rare" if i in rare else "busy")
            for i in range(many)]
    for start in range(0, many, 500):
        writer.write_batch(LedgerBatch(made[start:start + 500]))
    writer.close()
    rec.calls.clear()
    page, cursor = store.list_decisions(key_id="rare", limit=10)
    scanned = sum(1 for op, _ in rec.calls if op == "Query")
    assert [d["ts"] for d in page] == [T0 + many - 1] and cursor is not None  # short, more
    assert scanned <= 4 * (LIST_EXAMINED_ITEMS // 100 + 1)
    seen = [d["ts"] for d in page]
    pages = 1
    while cursor is not None:
        page, cursor = store.list_decisions(key_id="rare", limit=10, cursor=cursor)
        seen += [d["ts"] for d in page]
        pages += 1
    assert seen == [T0 + many - 1, T0 + 2, T0 + 1] and pages == 2


def test_a_short_body_is_stored_as_json(store: DynamoDBStore, client: Any) -> None:
    d = {"request_id": "r1", "ts": T0, "outcome": "refused", "status": 401}
    store.append_decision(d)
    item = client.get_item(TableName=LEDGER, Key=decision_key("r1", T0))["Item"]
    assert json.loads(item["body"]["S"]) == d and "route" not in item
    assert store.list_decisions(outcome="refused")[0] == [d]


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's size of an item: attribute names plus values (strings, numbers, binary)."""
    total = 0
    for name, value in item.items():
        total += len(name.encode())
        (kind, raw), = value.items()
        total += len(raw) if kind == "B" else len(str(raw).encode())
    return total


def test_listing_walks_day_partitions_newest_first(client: Any, clock: FakeClock) -> None:
    store, rec = _recorded_store(client, clock)
    for day in range(3):
        for i in range(2):
            store.append_decision(decision(f"d{day}-{i}", T0 - day * DAY + i))
    rec.calls.clear()
    page, cursor = store.list_decisions(limit=3)
    assert [d["request_id"] for d in page] == ["d0-1", "d0-0", "d1-1"]
    assert sorted({p.split("#")[1] for p in _partitions(rec)}) == ["2027-01-14", "2027-01-15"]
    page, cursor = store.list_decisions(limit=3, cursor=cursor)
    assert [d["request_id"] for d in page] == ["d1-0", "d2-1", "d2-0"]
    page, cursor = store.list_decisions(since=T0 - DAY)
    assert [d["request_id"] for d in page] == ["d0-1", "d0-0", "d1-1", "d1-0"]
    page, cursor = store.list_decisions(since=T0 - DAY, limit=3)
    assert [d["request_id"] for d in page] == ["d0-1", "d0-0", "d1-1"]
    page, cursor = store.list_decisions(since=T0 - DAY, limit=3, cursor=cursor)
    assert [d["request_id"] for d in page] == ["d1-0"] and cursor is None
    _, cursor = store.list_decisions(limit=5)
    assert store.list_decisions(since=T0, cursor=cursor) == ([], None)


def test_paging_merges_the_shards_in_order(store: DynamoDBStore) -> None:
    for i in range(40):
        store.append_decision(decision(f"r{i:02d}", T0 + i // 2))  # ties across shards
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = store.list_decisions(limit=6, cursor=cursor)
        seen += [d["request_id"] for d in page]
        if cursor is None:
            break
    assert seen == sorted(seen, key=lambda r: (int(r[1:]) // 2, r), reverse=True)
    assert len(seen) == 40


def test_stats_read_one_query_per_shard(store: DynamoDBStore, counted: CallCounter) -> None:
    for i in range(20):
        store.append_decision(decision(f"r{i}", T0 + i * 60))
    store.flush_stats()
    counted.delta()
    [row] = store.stats("route", T0, T0 + 3600)
    assert row["requests"] == 20
    assert counted.delta() == {"Query": STATS_SHARDS}


def test_time_keys_sort_like_the_numbers() -> None:
    values = [-5.5, -0.0001, 0.0, 1e-9, 1.0, 1_800_000_000.0, 1_800_000_000.25, 2e12]
    assert sorted(values, key=ts_key) == values
    assert all(len(ts_key(v)) == 16 for v in values)


# -- numbers come back as int and float, never Decimal -------------------------------


def test_numbers_come_back_as_int_and_float(store: DynamoDBStore, client: Any) -> None:
    # DynamoDB normalises 450.0 to "450": the type must come from the field.
    client.put_item(TableName=STATE, Item={
        "pk": {"S": "latency#1"}, "sk": {"S": "000000000007"}, "bucket": {"N": "7"},
        "n:t": {"N": "3"}, "ms:t": {"N": "450"}})
    client.put_item(TableName=STATE, Item={
        "pk": {"S": "spend#ci"}, "sk": {"S": "day:x"}, "usd": {"N": "3"}})
    [(bucket, count, total)] = store.get_latency(0)["t"]
    assert (type(bucket), type(count), type(total)) == (int, int, float)
    assert (bucket, count, total) == (7, 3, 450.0)
    spend = store.get_spend("ci", "day:x")
    assert type(spend) is float and spend == 3.0
    assert type(store.add_spend("ci", "day:x", 1)) is float
    store.append_decision(decision("r1", T0, latency_ms=100, cost_usd=1))
    rows = store.stats("target", T0, T0 + 3600)
    assert no_decimals(rows)
    assert type(rows[0]["requests"]) is int and type(rows[0]["cost_usd"]) is float
    store.put_breaker("p/m", {"open_until": 0.0, "version": 1}, None)
    assert no_decimals(store.get_breakers())
    assert no_decimals(store.list_decisions()[0])


def test_small_and_large_floats_are_written_in_fixed_point(store: DynamoDBStore) -> None:
    assert store.add_spend("ci", "p", 1e-05) == pytest.approx(1e-05)
    assert store.add_spend("ci", "p", 2.5e10) == pytest.approx(2.5e10 + 1e-05)
    store.add_latency({"t": (1, 1e-7)}, 3)
    assert store.get_latency(3) == {"t": [(3, 1, 1e-7)]}


# -- breakers -----------------------------------------------------------------------------


def test_a_lost_breaker_write_returns_the_winner_without_a_read(store: DynamoDBStore,
                                                                 counted: CallCounter) -> None:
    store.put_breaker("p/m", {"consecutive_failures": 1, "version": 1}, None)
    counted.delta()
    ok, current = store.put_breaker("p/m", {"consecutive_failures": 9, "version": 1}, None)
    assert (ok, current) == (False, {"consecutive_failures": 1, "version": 1})
    ok, current = store.put_breaker("p/m", {"consecutive_failures": 9, "version": 3}, 2)
    assert (ok, current) == (False, {"consecutive_failures": 1, "version": 1})
    assert counted.delta() == {"UpdateItem": 2}


def test_breakers_are_one_item_read_with_one_call(store: DynamoDBStore, counted: CallCounter,
                                                  client: Any) -> None:
    for i in range(5):
        store.put_breaker(f"p/m{i}", {"version": 1}, None)
    assert store.put_breaker("p/m0", {"version": 2}, 1)[0]  # another endpoint's write is
    assert store.put_breaker("p/m4", {"version": 2}, 1)[0]  # no conflict
    counted.delta()
    assert len(store.get_breakers()) == 5
    assert store.get_breaker("p/m4") == {"version": 2}
    assert counted.delta() == {"GetItem": 2}
    items = [i for i in client.scan(TableName=STATE)["Items"]]
    assert [(i["pk"]["S"], i["sk"]["S"]) for i in items] == [("live", "live")]


def test_a_latency_flush_of_many_targets_is_one_write(store: DynamoDBStore,
                                                      counted: CallCounter) -> None:
    store.add_latency({f"t{i}": (i + 1, 10.0 * (i + 1)) for i in range(12)}, 100)
    assert counted.delta() == {"UpdateItem": 1}
    assert store.get_latency(100)["t11"] == [(100, 12, 120.0)]


# -- retries ------------------------------------------------------------------------------


def _store_on(client: Any, clock: FakeClock) -> tuple[DynamoDBStore, CallCounter]:
    counter = count_calls(client)
    return DynamoDBStore(STATE, LEDGER, clock=clock, client=counter), counter


def test_throttling_is_retried_with_a_short_jittered_backoff(client: Any,
                                                             clock: FakeClock) -> None:
    store, counter = _store_on(Failing(client, times=2), clock)
    assert store.add_spend("ci", "day:x", 1.0) == 1.0
    assert counter.calls == {"UpdateItem": 3}
    first, second = clock.slept
    assert 0.0125 <= first <= 0.025 and 0.025 <= second <= 0.05


@pytest.mark.parametrize(("code", "status"), [
    ("ProvisionedThroughputExceededException", 400), ("RequestLimitExceeded", 400),
    ("InternalServerError", 500), ("SomethingNew", 503)])
def test_every_throttling_code_and_5xx_is_retried(client: Any, clock: FakeClock, code: str,
                                                  status: int) -> None:
    store, counter = _store_on(Failing(client, times=1, code=code, status=status), clock)
    assert store.get_breakers() == {}
    assert counter.calls == {"GetItem": 2} and len(clock.slept) == 1


def test_persistent_throttling_becomes_a_store_error(client: Any, clock: FakeClock) -> None:
    store, counter = _store_on(Failing(client, times=99), clock)
    with pytest.raises(StoreError, match="ThrottlingException"):
        store.get_spend("ci", "day:x")
    assert counter.calls == {"BatchGetItem": 4} and len(clock.slept) == 3


def test_other_errors_are_not_retried(client: Any, clock: FakeClock) -> None:
    store, counter = _store_on(Failing(client, times=1, code="ValidationException"), clock)
    with pytest.raises(StoreError, match="ValidationException"):
        store.get_breakers()
    assert counter.calls == {"GetItem": 1} and clock.slept == []


def test_a_transaction_conflict_is_retried_and_reported(client: Any,
                                                       clock: FakeClock) -> None:
    failing = Failing(client, times=1, code="TransactionCanceledException",
                      reasons=["None", "TransactionConflict"],
                      operations=frozenset({"TransactWriteItems"}))
    conflicts: list[int] = []
    counter = count_calls(failing)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counter,
                          on_conflict=lambda: conflicts.append(1))
    created = store.create_override(Override(
        id="", kind="disable_target", subject="deep", target=None, reason="r",
        created_at=T0, expires_at=T0 + 60, created_by=None))
    assert counter.calls["TransactWriteItems"] == 2 and conflicts == [1]
    assert [o.id for o in store.list_overrides(T0)] == [created.id]


def test_a_closed_store_makes_no_call(store: DynamoDBStore, counted: CallCounter) -> None:
    store.close()
    with pytest.raises(StoreError):
        store.get_breakers()
    assert counted.total == 0


def test_the_backoff_sleeps_through_the_clock() -> None:
    clock = FakeClock()
    blocking_sleep(clock)(0.25)
    assert clock.slept == [0.25] and clock.now() == T0 + 0.25
    blocking_sleep(SystemClock())(0)  # no event loop here: falls back to time.sleep


