"""What a request costs in DynamoDB, measured on the real Lambda wiring over moto.

``per_request.LambdaInstance`` is one warm Lambda instance whose every
DynamoDB call, item and unit is recorded (``WriteUnits``); requests come one
at a time, as Lambda runs them, on a ``FakeClock``.

The printed tables are the per-request numbers in
docs/decisions/0002-dynamodb-layout.md (run with ``-s``); docs/deploy.md's
cost table is computed from the same measurement (tests/lambda/test_lambda_cost.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.ledger.sampling import DEFAULT_PER_MINUTE
from tests.unit.aws.moto_support import LEDGER
from tests.unit.aws.per_request import BUDGETED, UNBUDGETED, LambdaInstance, measure, report, start


@pytest.fixture
def instances(client: Any, clock: FakeClock, tmp_path: Path) -> Iterator[Any]:
    made: list[LambdaInstance] = []

    def started(config: str = BUDGETED) -> LambdaInstance:
        inst = start(client, clock, tmp_path / f"humpyard-{len(made)}.toml", config)
        made.append(inst)
        return inst

    yield started
    for inst in made:
        inst.close()


def test_a_warm_request_costs_one_read_and_one_write_unit(instances: Any,
                                                             clock: FakeClock) -> None:
    inst = instances(UNBUDGETED)
    cost = measure(inst, clock, 100, 1.1)
    report("no budget", cost)
    assert cost["reads"] <= 1.0
    assert cost["calls"]["BatchGetItem"] == 100  # the state: one read, every request
    assert "Query" not in cost["calls"] and "TransactWriteItems" not in cost["calls"]
    assert cost["calls"]["PutItem"] == 100  # the decision
    assert cost["items"] <= 1.1
    assert cost["index_units"] == 0  # the decision is one item, keyed for listing: no index
    assert cost["units"] <= 1.1  # the decision (≤ 1 KB) + the shared flushes, amortised


def test_a_budgeted_key_adds_its_spend_and_nothing_else(instances: Any,
                                                        clock: FakeClock) -> None:
    inst = instances(BUDGETED)
    cost = measure(inst, clock, 100, 1.1)
    report("budgeted key", cost)
    assert cost["reads"] <= 1.0  # the spend comes back with the rest of the state
    assert cost["calls"]["PutItem"] == 100
    updates = cost["calls"]["UpdateItem"]
    # No spend write per request: the key's lease (one slice) carries the spend of
    # 10 s at a time (leases.FLUSH_SECS), so 110 s of traffic is ~11 writes of the
    # spend item plus the slice; stats and latency amortised as before.
    assert updates <= 110 / 10 + 1 + 30
    assert cost["items"] <= 2.3
    assert cost["index_units"] == 0
    assert cost["units"] <= 2.3


def test_at_eight_requests_a_second_the_state_is_read_ahead(instances: Any,
                                                            clock: FakeClock) -> None:
    inst = instances(UNBUDGETED)
    cost = measure(inst, clock, 80, 0.125)  # 10 s of traffic on one instance
    report("8 requests a second", cost)
    # About one read per half refresh interval, in the background: never per request.
    assert 10 <= cost["calls"]["BatchGetItem"] <= 22
    assert cost["reads"] <= 0.3
    assert cost["calls"]["PutItem"] == 80
    assert cost["items"] <= 1.1


def test_a_long_request_still_costs_one_read(instances: Any, clock: FakeClock) -> None:
    # The model takes 3 s: when the answer is flushed the view is older than the refresh,
    # but the gauges printed then are not worth a read; the next request's plan pays it.
    inst = instances(UNBUDGETED)
    inst.upstream_secs = 3.0
    cost = measure(inst, clock, 20, 1.1)
    report("3 s upstream", cost)
    assert cost["calls"]["BatchGetItem"] == 20


def test_an_idle_instance_waits_for_one_read(instances: Any, clock: FakeClock) -> None:
    inst = instances(UNBUDGETED)
    cost = measure(inst, clock, 5, 60.0)  # a minute apart: stats flush every time
    report("a minute apart", cost)
    assert cost["calls"]["BatchGetItem"] == 5
    assert cost["reads"] == 1.0


def test_a_thousand_wrong_keys_write_the_sampled_few_and_count_all(
        instances: Any, clock: FakeClock) -> None:
    # A user-written configuration (no refused_per_minute): on Lambda, junk traffic is
    # sampled by default (ledger/sampling.py), so it costs a few items, not one each.
    inst = instances(UNBUDGETED)
    assert inst.gw.config.refused_per_minute == DEFAULT_PER_MINUTE
    inst.writes.reset()
    started = clock.monotonic()
    for _ in range(1000):
        clock.advance(0.01)  # 100 a second for 10 s
        r = inst.http.post("/v1/chat/completions", headers={"authorization": "Bearer nope"},
                           json={"model": "auto", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 401
    elapsed = clock.monotonic() - started
    allowed = DEFAULT_PER_MINUTE + elapsed * DEFAULT_PER_MINUTE / 60  # the burst, the refill
    decisions = [w for w in inst.writes.writes
                 if w.table == LEDGER and w.partition.startswith("decision#")]
    assert 1 <= len(decisions) <= allowed
    assert inst.writes.calls["PutItem"] == len(decisions)
    assert inst.gw.metrics.refused.value(reason="invalid_api_key") == 1000  # every one counted
