"""Per-key limits shared by instances on one DynamoDB table (moto): blocks and slots.

Two instances (an ``Allowance`` over ``Leases`` over a ``DynamoDBStore`` each,
one table, as ``serve`` processes and Lambda instances build them) admit keys
through ``admit_shared`` and give back through ``settle``. Before limit
blocks each instance counted alone: two instances alternating admitted 10 of
10 requests against ``rpm_limit = 5`` (the first test's 7 all passed).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from humpyard.allowance import Allowance, Hold, LimitState
from humpyard.awaited import FIRST_PAUSE_SECS
from humpyard.clock import FakeClock
from humpyard.config.spec import KeySpec
from humpyard.errors import RateLimited
from humpyard.leases import Leases
from humpyard.limit_blocks import FORGET_SECS, LimitBlocks
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import count_calls
from humpyard.store.dynamodb_keys import LIMITS_TTL_SECS, limits_key
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from tests.support.polling import until
from tests.unit.aws.lambda_pair import HeldUpstream, clients, lambda_instances
from tests.unit.aws.moto_support import LEDGER, STATE, Failing, SerializedClient


def instances(client: Any, clock: FakeClock, n: int = 2, *,
              ticking: bool = True) -> list[Allowance]:
    """``n`` instances; ``ticking``: a long-lived process's (its upkeep runs ``tick``,
    called by hand here), else a Lambda instance's."""
    made = [Allowance(Leases(DynamoDBStore(STATE, LEDGER, clock=clock, client=client), clock))
            for _ in range(n)]
    for allowance in made:
        assert allowance.leases is not None
        assert isinstance(allowance.leases.limit_counter, LimitBlocks)
        allowance.leases.limit_counter.ticking = ticking
    return made


def key(**limits: int) -> KeySpec:
    return key_named("agent", **limits)


def key_named(name: str, **limits: int) -> KeySpec:
    return KeySpec(id=name, digest=b"", **limits)  # type: ignore[arg-type]


class Admitted:
    """One ``admit_shared``: its hold, or the limit that refused it, and the state."""

    def __init__(self, allowance: Allowance, k: KeySpec, clock: FakeClock, tokens: int):
        self.hold: Hold | None = None
        self.refused: str | None = None
        try:
            self.hold, state = asyncio.run(allowance.admit_shared(k, tokens, clock.now()))
        except RateLimited as e:
            self.refused = e.limit
            state = e.state  # type: ignore[attr-defined]
        assert state is not None
        self.state: LimitState = state


def take(allowance: Allowance, clock: FakeClock, tokens: int = 0, **limits: int) -> Admitted:
    return Admitted(allowance, key(**limits), clock, tokens)


def counts(allowance: Allowance, clock: FakeClock, **limits: int) -> LimitState:
    return asyncio.run(allowance.state_shared(key(**limits), clock.now()))


def tick(allowance: Allowance) -> None:
    assert allowance.leases is not None
    allowance.leases.tick()


@pytest.fixture
def minute(clock: FakeClock) -> FakeClock:
    assert clock.now() % 60 == 0  # the start of a minute: the tests stay in it
    return clock


def test_rpm_limit_refuses_the_sixth_request_across_two_instances(client: Any,
                                                                  minute: FakeClock) -> None:
    a, b = instances(client, minute)
    got = [take((a, b)[i % 2], minute, rpm_limit=5) for i in range(7)]
    assert [c.refused for c in got] == [None] * 5 + ["rpm_limit"] * 2
    assert [c.state.requests_left for c in got] == [4, 3, 2, 1, 0, 0, 0]  # the headers'
    assert counts(a, minute, rpm_limit=5).requests_left == 0
    assert counts(b, minute, rpm_limit=5).requests_left == 0
    minute.advance(60)  # a new minute starts from zero
    assert take(b, minute, rpm_limit=5).refused is None
    assert counts(a, minute, rpm_limit=5).requests_left == 4


def test_a_large_limit_is_taken_in_blocks_and_never_exceeded(client: Any,
                                                             minute: FakeClock) -> None:
    counted = count_calls(client)
    a, b = instances(counted, minute)
    admitted = 0
    for i in range(700):
        if take((a, b)[i % 2], minute, rpm_limit=600).refused is None:
            admitted += 1
    writes = counted.calls["UpdateItem"]
    assert admitted <= 600
    assert admitted >= 600 - 60  # at most the other instance's unused block goes begging
    assert writes <= 40, writes  # blocks of up to 60 requests, not a write per request


def test_a_flood_past_rpm_limit_costs_one_refused_write_per_minute(
        client: Any, minute: FakeClock) -> None:
    """Requests only grow within a minute: after one refusal the rest of the minute's
    are refused without a store call (a key's flood must not heat its item)."""
    counted = count_calls(client)
    (a,) = instances(counted, minute, 1)
    assert [take(a, minute, rpm_limit=5).refused for _ in range(5)] == [None] * 5
    before = counted.calls["UpdateItem"]
    assert {take(a, minute, rpm_limit=5).refused for _ in range(50)} == {"rpm_limit"}
    assert counted.calls["UpdateItem"] - before == 1
    minute.advance(60)
    assert take(a, minute, rpm_limit=5).refused is None


def test_many_threads_on_two_instances_never_pass_the_limit(client: Any,
                                                            minute: FakeClock) -> None:
    shared = SerializedClient(client)
    pair = instances(shared, minute)
    admitted: list[int] = []

    def hammer(allowance: Allowance) -> None:
        n = sum(1 for _ in range(60) if take(allowance, minute, rpm_limit=50).refused is None)
        admitted.append(n)

    threads = [threading.Thread(target=hammer, args=(pair[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 45 <= sum(admitted) <= 50


def test_tpm_limit_counts_estimates_and_settled_tokens_across_instances(
        client: Any, minute: FakeClock) -> None:
    """Estimates of 55 tokens, answers of 80: three fit in 250 (240 used), the fourth
    is refused on either instance once the other's answers are settled."""
    a, b = instances(client, minute)
    for i, inst in enumerate((a, b, a)):
        got = take(inst, minute, 55, tpm_limit=250)
        assert got.refused is None and got.hold is not None
        inst.settle(got.hold, 80)
        tick(inst)  # the upkeep writes the settled tokens
        assert counts((b, a)[i % 2], minute, tpm_limit=250).tokens_left == 250 - 80 * (i + 1)
    refused = take(b, minute, 55, tpm_limit=250)
    assert refused.refused == "tpm_limit"
    assert refused.state.tokens_left == 10


def test_a_request_larger_than_tpm_limit_only_in_an_unused_minute(client: Any,
                                                                 minute: FakeClock) -> None:
    a, b = instances(client, minute)
    assert take(a, minute, 500, tpm_limit=100).refused is None  # nothing used yet
    assert take(b, minute, 1, tpm_limit=100).refused == "tpm_limit"
    minute.advance(60)
    assert take(b, minute, 10, tpm_limit=100).refused is None
    assert take(a, minute, 500, tpm_limit=100).refused == "tpm_limit"


def test_max_parallel_requests_holds_and_free_slots_come_back_with_the_tick(
        client: Any, minute: FakeClock) -> None:
    a, b = instances(client, minute)
    first, second = take(a, minute, max_parallel_requests=2), take(b, minute,
                                                                  max_parallel_requests=2)
    assert first.hold is not None and second.hold is not None
    assert counts(a, minute, max_parallel_requests=2).in_flight == 2
    assert take(a, minute, max_parallel_requests=2).refused == "max_parallel_requests"
    assert take(b, minute, max_parallel_requests=2).refused == "max_parallel_requests"
    a.settle(first.hold, None)
    again = take(a, minute, max_parallel_requests=2)  # its own free slot, no write
    assert again.hold is not None
    a.settle(again.hold, None)
    assert take(b, minute, max_parallel_requests=2).refused == "max_parallel_requests"
    tick(a)  # a kept its free slot until its upkeep gave it back
    assert counts(b, minute, max_parallel_requests=2).in_flight == 1
    assert take(b, minute, max_parallel_requests=2).refused is None


def test_the_slots_of_a_dead_instance_count_until_their_lease_expires(
        client: Any, minute: FakeClock) -> None:
    a, b = instances(client, minute)
    for _ in range(2):
        assert take(a, minute, max_parallel_requests=2).refused is None
    # a dies holding both; b is refused until the lease (120 s, not renewed) expires
    minute.advance(100)
    assert take(b, minute, max_parallel_requests=2).refused == "max_parallel_requests"
    minute.advance(21)
    assert take(b, minute, max_parallel_requests=2).refused is None
    assert counts(b, minute, max_parallel_requests=2).in_flight == 1


def test_a_living_instance_renews_its_slots(client: Any, minute: FakeClock) -> None:
    a, b = instances(client, minute)
    assert take(a, minute, max_parallel_requests=1).refused is None
    for _ in range(5):  # 200 s of a long request, with the upkeep every 40 s
        minute.advance(40)
        tick(a)
    assert take(b, minute, max_parallel_requests=1).refused == "max_parallel_requests"


def test_close_gives_every_slot_back(client: Any, minute: FakeClock) -> None:
    a, b = instances(client, minute)
    got = take(a, minute, max_parallel_requests=1)
    assert got.hold is not None
    a.settle(got.hold, None)
    a.close()
    assert take(b, minute, max_parallel_requests=1).refused is None


def test_a_lambda_instance_gives_a_slot_back_when_its_request_ends(
        client: Any, minute: FakeClock) -> None:
    """No upkeep tick runs in Lambda: the release writes (on the background thread,
    drained before the instance may be frozen)."""
    a, b = instances(client, minute, ticking=False)
    got = take(a, minute, max_parallel_requests=1)
    assert got.hold is not None
    a.settle(got.hold, None)
    assert a.leases is not None and a.leases.drain(10)
    assert take(b, minute, max_parallel_requests=1).refused is None


def test_an_unreachable_table_leaves_the_instance_counting_alone(
        client: Any, minute: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Throttled past the store's retries: the request is admitted on this instance's own
    counts (logged), not failed; once the table answers, the shared counts return."""
    failing = Failing(client, times=4, operations=frozenset({"UpdateItem"}))
    (a,) = instances(failing, minute, 1)
    with caplog.at_level(logging.WARNING, logger="humpyard.leases"):
        got = take(a, minute, rpm_limit=5)
    assert got.refused is None and got.hold is not None and not got.hold.shared
    assert "counted on this process's own view" in caplog.text
    a.settle(got.hold, None)
    minute.advance(FIRST_PAUSE_SECS)  # no request asks the table again before
    again = take(a, minute, rpm_limit=5)
    assert again.hold is not None and again.hold.shared


LAMBDA_CONFIG = """
[providers.p]
base_url = "http://p.test/v1"
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
[routes.r]
type = "passthrough"
targets = ["t"]
[keys.k]
key_env = "KEY"
max_parallel_requests = 1
rpm_limit = 3
"""


def test_two_lambda_instances_share_a_keys_limits(client: Any, tmp_path: Path) -> None:
    """The real Lambda wiring: while A's request is in flight B is refused
    (max_parallel_requests = 1); once A's answer is flushed its slot is back and B is
    served; the fourth request of the minute, on either, is refused (rpm_limit = 3)."""
    up = HeldUpstream({"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5})
    apps = lambda_instances(client, FakeClock(), tmp_path, LAMBDA_CONFIG, up)
    body = {"model": "r", "messages": [{"role": "user", "content": "x"}]}

    async def run() -> list[httpx.Response]:
        a, b = clients(apps)
        first = asyncio.create_task(a.post("/v1/chat/completions", json=body))
        await asyncio.wait_for(up.arrived.wait(), 10)
        busy = await asyncio.wait_for(b.post("/v1/chat/completions", json=body), 5)
        up.release.set()
        out = [await first, busy]
        out.append(await b.post("/v1/chat/completions", json=body))  # A's slot is back
        out.append(await a.post("/v1/chat/completions", json=body))
        out.append(await b.post("/v1/chat/completions", json=body))  # the 4th of the minute
        await a.aclose()
        await b.aclose()
        return out

    done, busy, second, third, fourth = asyncio.run(run())
    for inst, _ in apps:
        inst.close()
    assert [r.status_code for r in (done, busy, second, third, fourth)] == \
        [200, 429, 200, 200, 429], [r.text for r in (busy, fourth)]
    assert "max_parallel_requests is 1" in busy.json()["error"]["message"]
    assert "rpm_limit is 3" in fourth.json()["error"]["message"]
    item = client.get_item(TableName=STATE, Key={"pk": {"S": "limits#k"},
                                                 "sk": {"S": "limits"}})["Item"]
    assert item["sl"]["N"] == "0"  # every slot given back
    assert not [n for n in item if n.startswith("s_")]


@pytest.mark.parametrize("ticking,limits,tokens,gap,most", [
    (True, {"rpm_limit": 5000}, 0, 0.1, 0.01),
    (True, {"rpm_limit": 60}, 0, 1.1, 0.2),
    (True, {"tpm_limit": 1_000_000}, 1000, 0.1, 0.12),
    (True, {"max_parallel_requests": 8}, 0, 0.1, 0.2),
    (True, {"rpm_limit": 600, "tpm_limit": 1_000_000, "max_parallel_requests": 8}, 1000,
     0.1, 0.25),
    (False, {"rpm_limit": 60}, 0, 1.1, 0.2),
    (False, {"tpm_limit": 1_000_000}, 1000, 0.1, 0.12),
    (False, {"max_parallel_requests": 8}, 0, 0.1, 2.0),
], ids=["rpm5000", "rpm60", "tpm", "parallel", "all", "lambda-rpm60", "lambda-tpm",
        "lambda-parallel"])
def test_writes_per_request(client: Any, clock: FakeClock, ticking: bool,
                            limits: dict[str, int], tokens: int, gap: float,
                            most: float) -> None:
    """The store traffic docs/routing.md states: 300 requests one after another on one
    instance, ``gap`` seconds apart, answers using 80 % of their token estimate; a
    long-lived process's upkeep ticks every second."""
    counted = count_calls(client)
    (a,) = instances(counted, clock, 1, ticking=ticking)
    last_tick, n = clock.now(), 300
    for _ in range(n):
        got = take(a, clock, tokens, **limits)
        assert got.hold is not None, got.refused
        a.settle(got.hold, int(tokens * 0.8) if tokens else None)
        if not ticking:
            assert a.leases is not None and a.leases.drain(10)
        clock.advance(gap)
        if ticking and clock.now() - last_tick >= 1.0:
            tick(a)
            last_tick = clock.now()
    writes = counted.calls["UpdateItem"] / n
    print(f"{'long-lived' if ticking else 'Lambda'} {limits}: {writes:.3f} writes a request")
    assert writes <= most
    assert not counted.calls["GetItem"] and not counted.calls["BatchGetItem"]


def test_the_upkeep_forgets_idle_keys_but_not_one_holding_a_slot(
        client: Any, minute: FakeClock) -> None:
    """The memory bound: an instance keeps a key's counts while it holds or owes
    something, and forgets it ``FORGET_SECS`` after its minute began once it does not."""
    (a,) = instances(client, minute, 1)
    assert a.leases is not None
    blocks = a.leases.limit_counter
    assert isinstance(blocks, LimitBlocks)
    idle = Admitted(a, key_named("idle", rpm_limit=100), minute, 0)
    busy = Admitted(a, key_named("busy", max_parallel_requests=1), minute, 0)
    assert idle.hold is not None and busy.hold is not None
    a.settle(idle.hold, None)
    tick(a)
    assert set(blocks._keys) == {"idle", "busy"}
    minute.advance(FORGET_SECS)  # not past it yet
    tick(a)
    assert set(blocks._keys) == {"idle", "busy"}
    minute.advance(1)
    tick(a)
    assert set(blocks._keys) == {"busy"}  # its slot is still held (and renewed)
    a.settle(busy.hold, None)
    tick(a)  # the slot goes back at this tick; the key, at the next
    tick(a)
    assert blocks._keys == {}
    again = Admitted(a, key_named("idle", rpm_limit=100), minute, 0)  # a key seen anew
    assert again.hold is not None and again.state.requests_left == 99  # in this minute


def test_a_keys_limits_item_expires_a_week_after_its_last_write(client: Any,
                                                                minute: FakeClock) -> None:
    """DynamoDB's TTL removes the item of a key no longer used, so the table holds the
    keys in use: every write moves its expiry to ``LIMITS_TTL_SECS`` on."""
    (a,) = instances(client, minute, 1)

    def expiry() -> float:
        item = client.get_item(TableName=STATE, Key=limits_key("agent"))["Item"]
        return float(item[TTL_ATTRIBUTE]["N"])

    assert take(a, minute, rpm_limit=5).refused is None
    assert expiry() == pytest.approx(minute.now() + LIMITS_TTL_SECS, abs=1)
    minute.advance(3600)
    assert take(a, minute, rpm_limit=5).refused is None
    assert expiry() == pytest.approx(minute.now() + LIMITS_TTL_SECS, abs=1)


class HeldWrites:
    """A client proxy whose ``update_item`` calls wait until ``go`` is set."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != "update_item":
            return attr

        def held(**kwargs: Any) -> Any:
            self.go.wait(30)
            return attr(**kwargs)
        return held


def test_a_slot_taken_after_its_request_stopped_waiting_is_given_back(
        client: Any, minute: FakeClock) -> None:
    """The store answers after the request gave up waiting (and was admitted on this
    instance's own counts): the slot it took is given back, not held for good. Before:
    the instance kept it, renewing it every tick, and the key lost one parallel slot."""
    held = HeldWrites(client)
    a = Allowance(Leases(DynamoDBStore(STATE, LEDGER, clock=minute, client=held), minute,
                         wait_secs=0.1))
    assert a.leases is not None
    got = take(a, minute, max_parallel_requests=1)
    assert got.hold is not None and not got.hold.shared  # did not wait for the store
    a.settle(got.hold, None)
    held.go.set()  # the slot is taken now, for nobody
    (b,) = instances(client, minute, 1)

    def free() -> bool:
        tick(a)  # gives back a's free slots
        return counts(b, minute, max_parallel_requests=1).in_flight == 0
    until(free, "the late slot given back")
    assert take(b, minute, max_parallel_requests=1).hold is not None
