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
from humpyard.store.base import LedgerBatch
from humpyard.store.dynamodb import DynamoDBStore, create_tables
from humpyard.store.dynamodb_base import blocking_sleep, ts_key
from humpyard.store.dynamodb_calls import CallCounter, count_calls
from humpyard.store.dynamodb_ledger import INDEX_SHARDS, LedgerWriteError
from humpyard.store.dynamodb_schema import DECISION_INDEXES, TTL_ATTRIBUTE
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
    indexes = {i["IndexName"]: i for i in ledger["GlobalSecondaryIndexes"]}
    assert set(indexes) == {"by_day", "by_rule", "by_outcome", "by_route", "by_key"}
    for name, attr in DECISION_INDEXES:
        assert [k["AttributeName"] for k in indexes[name]["KeySchema"]] == [attr, "g_sk"]
        assert indexes[name]["Projection"]["ProjectionType"] == "INCLUDE"
    for table in (STATE, LEDGER):
        ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    create_tables(client, STATE, LEDGER)  # again: existing tables are left alone


def test_a_decision_is_one_conditional_put_and_its_stats_wait(store: DynamoDBStore,
                                                               counted: CallCounter) -> None:
    store.append_decision(decision("r1", T0))
    assert counted.delta() == {"PutItem": 1}
    with pytest.raises(ConflictError):
        store.append_decision(decision("r1", T0))
    assert counted.delta() == {"PutItem": 1}
    assert [g["requests"] for g in store.stats("route", T0, T0 + 3600)] == [1]  # pending


def test_stats_are_summed_in_the_instance_and_flushed_as_one_add_per_group(
        client: Any, clock: FakeClock) -> None:
    writer_calls = count_calls(client)
    writer = DynamoDBStore(STATE, LEDGER, clock=clock, client=writer_calls)
    reader = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
    for i in range(30):
        clock.advance(1.0)
        writer.append_decision(decision(f"r{i}", T0 + i, latency_ms=100.0 + i))
    assert writer_calls.delta() == {"PutItem": 30}  # 30 s: no flush due yet
    assert reader.stats("route", T0, T0 + 3600) == []  # not flushed: this instance only
    assert writer.stats("route", T0, T0 + 3600)[0]["requests"] == 30
    writer_calls.delta()

    clock.advance(30.0)
    writer.append_decision(decision("r30", T0 + 30))
    # route, key, target, provider of one hour, and the key's route, target and
    # provider (aggregates.SCOPED): seven ADDs for 31 decisions
    assert writer_calls.delta() == {"PutItem": 1, "UpdateItem": 7}
    [row] = reader.stats("route", T0, T0 + 3600)
    assert row["requests"] == 31 and row["cost_usd"] == pytest.approx(0.31)
    assert reader.stats("route", T0, T0 + 3600) == writer.stats("route", T0, T0 + 3600)
    writer_calls.delta()

    writer.append_decision(decision("r31", T0 + 31))
    writer.close()  # the instance's last flush
    assert writer_calls.delta() == {"PutItem": 1, "UpdateItem": 7}
    assert reader.stats("key", T0, T0 + 3600)[0]["requests"] == 32


def test_with_no_flush_interval_stats_are_written_with_each_decision(
        client: Any, clock: FakeClock) -> None:
    counted = count_calls(client)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counted, stats_flush_secs=0)
    store.append_decision(decision("r1", T0))
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
    store.write_batch(LedgerBatch([decision("a", T0), decision("b", T0 + 1)],
                                  {("ci", "day:x"): 0.25, ("ops", "day:x"): 1.0}))
    assert counted.delta() == {"PutItem": 2, "UpdateItem": 2}
    store.write_batch(LedgerBatch([decision("a", T0), decision("c", T0 + 2)],
                                  {("ci", "day:x"): 0.5}))
    assert store.get_spend("ci", "day:x") == 0.75
    assert store.stats("route", T0, T0 + 3600)[0]["requests"] == 3  # "a" counted once
    assert [d["request_id"] for d in store.list_decisions()[0]] == ["c", "b", "a"]


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


# -- the query paths: indexes, never a scan ---------------------------------------------


def _recorded_store(client: Any, clock: FakeClock) -> tuple[DynamoDBStore, Recorder]:
    recorder = Recorder(client)
    return DynamoDBStore(STATE, LEDGER, clock=clock, client=recorder), recorder


def _partitions(rec: Recorder) -> list[tuple[str, str]]:
    return [(kw["IndexName"], kw["ExpressionAttributeValues"][":p"]["S"])
            for op, kw in rec.calls if op == "Query"]


def test_route_lists_from_its_shards_and_the_rest_from_the_day_shards(
        client: Any, clock: FakeClock) -> None:
    store, rec = _recorded_store(client, clock)
    for i in range(6):
        store.append_decision(decision(f"r{i}", T0 + i, rule="deep" if i % 2 else "default",
                                       outcome="failed" if i % 3 == 0 else "ok",
                                       route="r" if i < 3 else "s", key_id=f"k{i % 2}"))
    shards = range(INDEX_SHARDS)
    cases: list[tuple[dict[str, str], list[str], list[str]]] = [
        ({"route": "s"}, [f"s#2027-01-15#{n}" for n in shards], ["r5", "r4", "r3"]),
        ({"outcome": "failed"}, [f"2027-01-15#x#{n}" for n in shards], ["r3", "r0"]),
        ({"outcome": "ok"}, [f"2027-01-15#ok#{n}" for n in shards], ["r5", "r4", "r2", "r1"]),
        ({"rule": "deep"}, [f"2027-01-15#{c}#{n}" for c in ("ok", "x") for n in shards],
         ["r5", "r3", "r1"]),
        ({"key_id": "k0"}, [f"2027-01-15#{c}#{n}" for c in ("ok", "x") for n in shards],
         ["r4", "r2", "r0"]),
        ({}, [f"2027-01-15#{c}#{n}" for c in ("ok", "x") for n in shards],
         ["r5", "r4", "r3", "r2", "r1", "r0"]),
    ]
    for filters, partitions, expected in cases:
        rec.calls.clear()
        page, cursor = store.list_decisions(**filters)  # type: ignore[arg-type]
        assert [d["request_id"] for d in page] == expected and cursor is None, filters
        ops = rec.operations()
        assert "Scan" not in ops and set(ops) == {"Query", "BatchGetItem"}
        index = "by_route" if "route" in filters else "by_day"
        # today's partitions, then yesterday's (nothing was found there)
        assert _partitions(rec)[:len(partitions)] == [(index, p) for p in partitions]


def test_combined_filters_query_one_index_and_filter_the_rest(client: Any,
                                                              clock: FakeClock) -> None:
    store, rec = _recorded_store(client, clock)
    store.append_decision(decision("a", T0, rule="deep", outcome="failed"))
    store.append_decision(decision("b", T0 + 1, rule="deep", outcome="ok"))
    store.append_decision(decision("c", T0 + 2, rule="other", outcome="failed"))
    store.append_decision(decision("d", T0 + 3, rule="deep", outcome="failed", route="other"))
    rec.calls.clear()
    page, _ = store.list_decisions(rule="deep", outcome="failed")
    assert [d["request_id"] for d in page] == ["d", "a"]
    queries = [kw for op, kw in rec.calls if op == "Query"]
    assert {q["IndexName"] for q in queries} == {"by_day"}
    assert all("FilterExpression" in q for q in queries)
    rec.calls.clear()
    page, _ = store.list_decisions(route="auto", rule="deep", outcome="failed")
    assert [d["request_id"] for d in page] == ["a"]
    assert {kw["IndexName"] for op, kw in rec.calls if op == "Query"} == {"by_route"}
    assert "Scan" not in rec.operations()


def test_a_decision_has_two_index_entries_and_a_small_item(store: DynamoDBStore,
                                                            client: Any) -> None:
    d = decision("r1", T0, key_id=None, note="x" * 300)
    store.append_decision(d)
    item = client.get_item(TableName=LEDGER, Key={"pk": {"S": "decision#r1"},
                                                   "sk": {"S": "decision"}})["Item"]
    assert int(item[TTL_ATTRIBUTE]["N"]) == int(T0 + 30 * DAY)
    indexed = {attr for _, attr in DECISION_INDEXES if attr in item}
    assert indexed == {"g_all", "g_route"}
    assert item["g_all"]["S"].startswith("2027-01-15#ok#")
    assert item["g_route"]["S"].startswith("auto#2027-01-15#")
    assert "body" not in item and len(item["bodyz"]["B"]) < len(json.dumps(d))  # compressed
    assert item_size(item) <= 1024
    assert store.get_decision("r1") == d


def test_a_short_body_is_stored_as_json(store: DynamoDBStore, client: Any) -> None:
    d = {"request_id": "r1", "ts": T0, "outcome": "refused", "status": 401}
    store.append_decision(d)
    item = client.get_item(TableName=LEDGER, Key={"pk": {"S": "decision#r1"},
                                                   "sk": {"S": "decision"}})["Item"]
    assert json.loads(item["body"]["S"]) == d and "g_route" not in item
    assert item["g_all"]["S"].startswith("2027-01-15#x#")
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
    assert sorted({p.split("#")[0] for _, p in _partitions(rec)}) == [
        "2027-01-14", "2027-01-15"]
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


