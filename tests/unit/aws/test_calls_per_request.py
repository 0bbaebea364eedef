"""What a request costs in DynamoDB, measured on the real Lambda wiring over moto.

Each ``LambdaInstance`` is what a Lambda instance runs: ``build_gateway``
(DynamoDB store, one ``SharedState``, ``SharedHealth``, ``SharedLatency``,
the batched writer) under ``FlushMiddleware`` flushing through
``Instance.flush`` before every response's last byte, with an
``httpx.MockTransport`` upstream. ``WriteUnits`` sits between the store and
moto and records every call, every item written and its write units
(index entries included). Requests come one at a time, as Lambda runs
them; the clock is a ``FakeClock`` advanced between them.

The printed tables are the per-request numbers in
docs/decisions/0002-dynamodb-layout.md (run with ``-s``).
"""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from humpyard.aws.build import Instance, build_gateway
from humpyard.aws.env import LambdaEnv
from humpyard.aws.flush import FlushMiddleware
from humpyard.clock import FakeClock
from humpyard.http.app import create_app
from tests.unit.aws.moto_support import LEDGER, STATE
from tests.unit.aws.write_units import WriteUnits

TARGETS = """
state_refresh_ms = 1000
[providers.p]
base_url = "http://upstream.test/v1"
[targets.fast]
endpoints = [{ provider = "p", model = "m1", price = { input = 1.0, output = 2.0 } }]
[targets.other]
endpoints = [{ provider = "p", model = "m2", price = { input = 1.0, output = 2.0 } }]
[routes.auto]
type = "fastest"
targets = ["fast", "other"]
"""
BUDGETED = TARGETS + """
[keys.ci]
key_env = "CI_KEY"
budget = { usd = 100.0, period = "day" }
"""
UNBUDGETED = TARGETS + """
[keys.ci]
key_env = "CI_KEY"
"""
READS = ("GetItem", "BatchGetItem", "Query", "Scan")


def answer(request: httpx.Request) -> httpx.Response:
    model = json.loads(request.content)["model"]
    return httpx.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


class LambdaInstance:
    """One warm Lambda instance on the shared moto tables, every DynamoDB write recorded.

    ``upstream_secs`` is how long (on the clock) the upstream takes to answer.
    """

    upstream_secs = 0.0

    def __init__(self, client: Any, clock: FakeClock, path: Path, config: str) -> None:
        path.write_text(config)
        env = LambdaEnv.from_environ({"HUMPYARD_STATE_TABLE": STATE,
                                      "HUMPYARD_LEDGER_TABLE": LEDGER,
                                      "HUMPYARD_CONFIG": str(path)})
        self.writes = WriteUnits(client, STATE, LEDGER)

        def upstream(request: httpx.Request) -> httpx.Response:
            clock.advance(self.upstream_secs)
            return answer(request)

        self.gw = build_gateway(env, dynamodb=self.writes, clock=clock,
                                environ={"CI_KEY": "ci-secret"},
                                transport=httpx.MockTransport(upstream))
        self.instance = Instance(env=env, gateway=self.gw,
                                 logger=logging.getLogger("tests.lambda"),  # type: ignore[arg-type]
                                 stdout=io.StringIO())
        app = FlushMiddleware(create_app(self.gw.config, gateway=self.gw), self.instance.flush)
        self.http = TestClient(app)

    def request(self, model: str = "auto") -> None:
        r = self.http.post("/v1/chat/completions",
                           headers={"authorization": "Bearer ci-secret"},
                           json={"model": model, "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 200, r.text
        assert self.gw.writer.pending == 0  # written before the last byte

    def close(self) -> None:
        self.http.close()
        self.instance.close()


@pytest.fixture
def instances(client: Any, clock: FakeClock, tmp_path: Path) -> Iterator[Any]:
    made: list[LambdaInstance] = []

    def start(config: str = BUDGETED) -> LambdaInstance:
        inst = LambdaInstance(client, clock, tmp_path / f"humpyard-{len(made)}.toml", config)
        made.append(inst)
        for _ in range(3):  # warm: cold-start reads (the whole latency window, overrides)
            clock.advance(1.1)
            inst.request()
        inst.writes.reset()
        return inst

    yield start
    for inst in made:
        inst.close()


def measure(inst: LambdaInstance, clock: FakeClock, n: int, gap_secs: float) -> dict[str, Any]:
    """Serve ``n`` requests ``gap_secs`` apart; calls, items and write units per request."""
    inst.writes.reset()
    for _ in range(n):
        clock.advance(gap_secs)
        inst.request()
    calls = Counter(inst.writes.calls)
    return {"requests": n, "gap_secs": gap_secs, "calls": dict(calls),
            "reads": sum(calls[op] for op in READS) / n,
            "items": inst.writes.items() / n,
            "units": inst.writes.total_units() / n,
            "index_units": sum(w.units for w in inst.writes.writes if w.index) / n,
            "read_units": inst.writes.read_units / n}


def report(title: str, cost: dict[str, Any]) -> None:
    print(f"\n{title}: {cost['requests']} requests {cost['gap_secs']} s apart, per request: "
          f"{cost['reads']:.2f} read calls, {cost['items']:.2f} items written, "
          f"{cost['units']:.2f} write units ({cost['index_units']:.2f} of them index "
          f"entries), {cost['read_units']:.2f} read units; calls: {cost['calls']}")


def test_a_warm_request_costs_one_read_and_at_most_two_items(instances: Any,
                                                             clock: FakeClock) -> None:
    inst = instances(UNBUDGETED)
    cost = measure(inst, clock, 100, 1.1)
    report("no budget", cost)
    assert cost["reads"] <= 1.0
    assert cost["calls"]["BatchGetItem"] == 100  # the state: one read, every request
    assert "Query" not in cost["calls"] and "TransactWriteItems" not in cost["calls"]
    assert cost["calls"]["PutItem"] == 100  # the decision
    assert cost["items"] <= 2.0
    assert cost["units"] <= 3.5  # decision ≤ 1 KB + two index entries + the shared flushes


def test_a_budgeted_key_adds_its_spend_and_nothing_else(instances: Any,
                                                        clock: FakeClock) -> None:
    inst = instances(BUDGETED)
    cost = measure(inst, clock, 100, 1.1)
    report("budgeted key", cost)
    assert cost["reads"] <= 1.0  # the spend comes back with the rest of the state
    assert cost["calls"]["PutItem"] == 100
    updates = cost["calls"]["UpdateItem"]
    assert 100 < updates <= 100 + 30  # one spend ADD each, stats and latency amortised
    assert cost["items"] <= 2.3
    assert cost["units"] <= 4.5


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
