"""Budget leases on every store: exact at the bound, expiry with a FakeClock, batched spend.

Each "instance" is its own store object on one backend (one MemoryStore is
shared as is; SQLite: two connections to one file; DynamoDB: two
``DynamoDBStore`` on one moto table), as two processes or Lambda instances
would be. The heat test at the end counts billed writes per item with one
budgeted key taking every request.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.leases import Leases
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.memory import MemoryStore
from humpyard.store.sqlite import SQLiteStore
from tests.unit.aws.moto_support import LEDGER, STATE, moto_tables
from tests.unit.aws.test_partition_heat import (
    BOUND,
    INSTANCES,
    RATE,
    REQUESTS,
    ROUTES,
    answer,
    config,
    report,
    run_heat,
    zipf,
)

Pair = Callable[[], Any]


@contextmanager
def stores(kind: str, tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Any, Any]]:
    if kind == "memory":
        one = MemoryStore()
        yield one, one
        return
    if kind == "sqlite":
        a, b = (SQLiteStore(str(tmp_path / "ledger.db"), clock) for _ in range(2))
        try:
            yield a, b
        finally:
            a.close()
            b.close()
        return
    with moto_tables() as client:
        yield (DynamoDBStore(STATE, LEDGER, clock=clock, client=client),
               DynamoDBStore(STATE, LEDGER, clock=clock, client=client))


KINDS = ["memory", "sqlite", "dynamodb"]


def lease(store: Any, who: str, now: float, *, want: float = 0.0, held: float = 0.0,
          spent: float = 0.0, limit: float = 1.0, secs: float = 120.0) -> Any:
    return store.lease_budget("k", "day:2026-12-02", who, limit=limit, spent=spent,
                              held=held, want=want, now=now, expires_at=now + secs)


@pytest.mark.parametrize("kind", KINDS)
def test_a_lease_is_granted_exactly_while_spend_and_leases_fit(kind: str, tmp_path: Path
                                                               ) -> None:
    clock = FakeClock()
    now = clock.now()
    with stores(kind, tmp_path, clock) as (a, b):
        got = lease(a, "a", now, want=0.6)
        assert got.granted and got.held == pytest.approx(0.6) and got.holders == 1
        assert not lease(b, "b", now, want=0.5).granted  # 0.6 + 0.5 > 1
        got = lease(b, "b", now, want=0.4)  # exactly the rest
        assert got.granted and got.committed == pytest.approx(1.0) and got.holders == 2
        # a spent 0.2 of its 0.6 and gives the rest back: 0.2 + 0.4 committed
        got = lease(a, "a", now, spent=0.2, held=0.0)
        assert not got.granted and got.held == 0 and got.committed == pytest.approx(0.6)
        assert lease(b, "b", now, held=0.4, want=0.4).granted
        assert not lease(b, "b", now, held=0.8, want=0.01).granted
        assert a.get_spend("k", "day:2026-12-02") == pytest.approx(0.2)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_instances_lease_stops_counting_at_its_expiry(kind: str, tmp_path: Path
                                                             ) -> None:
    clock = FakeClock()
    with stores(kind, tmp_path, clock) as (a, b):
        assert lease(a, "a", clock.now(), want=0.9).granted  # then a dies
        clock.advance(119)
        assert not lease(b, "b", clock.now(), want=0.2).granted  # still a's
        clock.advance(2)
        got = lease(b, "b", clock.now(), want=0.2)  # reclaimed: expired at 120 s
        assert got.granted and got.holders == 1
        # a comes back believing it holds 0.9: its lease is gone, it is not revived
        got = lease(a, "a", clock.now(), held=0.9)
        assert got.held == 0 and got.committed == pytest.approx(0.2)


def test_spend_waits_in_the_instance_and_is_written_with_the_lease(tmp_path: Path) -> None:
    """On DynamoDB a lease write carries the spend of many requests: ten requests, one
    slice taken, no write per request; the spend reaches the item within FLUSH_SECS."""
    clock = FakeClock()
    with moto_tables() as client:
        writes: list[str] = []

        class Counting:
            def __getattr__(self, name: str) -> Any:
                if name == "update_item":
                    def counted(**kw: Any) -> Any:
                        writes.append(kw["Key"]["pk"]["S"])
                        return client.update_item(**kw)
                    return counted
                return getattr(client, name)

        store = DynamoDBStore(STATE, LEDGER, clock=clock, client=Counting())
        leases = Leases(store, clock)
        leases.inline = True  # run the store calls in place: the test counts them in order
        period = "day:2026-12-02"

        async def ten() -> None:
            for _ in range(10):
                assert await leases.take("k", period, 10.0, 0.05)
                leases.unreserve("k", period, 0.05)
                assert leases.spend("k", period, 0.01)
                clock.advance(0.5)

        asyncio.run(ten())
        # the first request's need (which tells how much is left), then one slice ($1)
        assert writes == ["spend#k", "spend#k"]
        assert store.get_spend("k", period) == pytest.approx(0.01)  # with the slice
        clock.advance(6.0)
        assert leases.spend("k", period, 0.01)  # 10 s since the first unwritten cost
        assert writes == ["spend#k"] * 3
        assert store.get_spend("k", period) == pytest.approx(0.11)
        leases.close()  # shutdown gives the lease back
        assert store.get_spend("k", period) == pytest.approx(0.11)
        assert Leases(DynamoDBStore(STATE, LEDGER, clock=clock, client=client), clock,
                      instance="other").store.lease_budget(
            "k", period, "other", limit=10.0, spent=0, held=0, want=9.89,
            now=clock.now(), expires_at=clock.now() + 1).granted


def test_one_budgeted_key_at_1000_requests_per_second_heats_no_item(
        client: Any, clock: FakeClock, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26: every request on one budgeted key; before leases ``spend#k0`` took a
    write per request (1,000 WCU/s). No item may take more than half the requests."""
    rng = random.Random(3)
    routes = rng.choices(range(ROUTES), zipf(ROUTES), k=REQUESTS)
    writes = run_heat(client, clock, tmp_path, text=config(), instances=INSTANCES,
                      transport=httpx.MockTransport(answer), routes=routes,
                      keys=[0] * REQUESTS)
    with capsys.disabled():
        hottest, table = report(writes, REQUESTS, INSTANCES, " (one budgeted key)")
    assert hottest <= BOUND, table
    spend = sum(w.units for w in writes.writes if w.partition == "spend#k0")
    assert 0 < spend / REQUESTS * RATE <= BOUND, table


@pytest.mark.parametrize("kind", KINDS)
def test_a_thawed_instance_does_not_reserve_from_a_lease_that_expired(
        kind: str, tmp_path: Path) -> None:
    """A Lambda instance frozen between invocations (or a stopped process) for longer
    than its lease: the store let the lease go and another instance took the room,
    yet the thawed instance reserved its next requests from the slice it still had in
    mind, with no store call, spending past the budget. A lease not written for
    ``lease_secs`` is now taken again through the store before it is reserved from."""
    clock = FakeClock()
    period = "day:2026-12-02"
    with stores(kind, tmp_path, clock) as (sa, sb):
        a, b = Leases(sa, clock, instance="a"), Leases(sb, clock, instance="b")
        a.inline = b.inline = True

        async def run() -> None:
            assert await a.take("k", period, 1.0, 0.05)  # a holds a slice of 0.05
            a.unreserve("k", period, 0.05)  # its request ended: the slice is free again
            assert a.held() == {("k", period): pytest.approx(0.05)}
            clock.advance(121)  # a frozen: no tick, no write; its lease expires
            for _ in range(20):  # b takes the whole budget, a's room included
                assert await b.take("k", period, 1.0, 0.05)
            # a thaws: nothing is left anywhere, its old slice included
            assert not await a.take("k", period, 1.0, 0.05)
            assert a.held() == {}  # the store's answer: the lease is gone
        asyncio.run(run())


def test_a_lease_whose_renewals_fail_is_still_reserved_from_without_a_store_call(
        tmp_path: Path) -> None:
    """The other side of the thawed instance: a long-lived process whose store is down
    keeps trying to renew its lease (``tick``) and keeps reserving from it on its own
    view, past ``lease_secs``, instead of waiting for the store on every request."""
    from tests.faults.test_store import BrokenWrites
    clock = FakeClock()
    period = "day:2026-12-02"
    store = SQLiteStore(str(tmp_path / "ledger.db"), clock)
    try:
        leases = Leases(store, clock, instance="a")
        leases.inline = True

        async def run() -> None:
            assert await leases.take("k", period, 1.0, 0.05)
            assert await leases.take("k", period, 1.0, 0.05)  # a slice of 0.1 now
            leases.unreserve("k", period, 0.1)
            broken = BrokenWrites(store)
            leases.store = broken  # the store goes down
            for _ in range(15):  # 150 s: past lease_secs, the tick trying every 10 s
                clock.advance(10)
                leases.tick()
            tried = len(broken.failed)
            assert tried > 0
            assert leases.reserve_now("k", period, 1.0, 0.05)  # its own view
            assert len(broken.failed) == tried  # and no store call for it
        asyncio.run(run())
    finally:
        store.close()
