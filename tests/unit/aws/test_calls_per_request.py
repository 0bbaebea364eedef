"""What a request costs in DynamoDB calls, measured on the real app with the AWS backends.

The gateway runs in process (``create_app`` with lifespan off, as in Lambda)
on ``DynamoDBStore`` + ``SharedHealth`` + ``SharedLatency`` over moto, with a
``MockTransport`` upstream; ``count_calls`` counts what reaches DynamoDB.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from humpyard.clock import FakeClock
from humpyard.config import load_config_text
from humpyard.gateway import Gateway, health_settings
from humpyard.health.shared import SharedHealth
from humpyard.http.app import create_app
from humpyard.latency_shared import SharedLatency
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter, count_calls
from tests.unit.aws.moto_support import LEDGER, STATE

CONFIG = """
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
[keys.ci]
key_env = "CI_KEY"
budget = { usd = 100.0, period = "day" }
"""


def answer(request: httpx.Request) -> httpx.Response:
    model = json.loads(request.content)["model"]
    return httpx.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


class Instance:
    """One warm Lambda instance: its app, its gateway and its counted DynamoDB client."""

    def __init__(self, client: Any, clock: FakeClock) -> None:
        config = load_config_text(CONFIG, env={"CI_KEY": "ci-secret"})
        self.calls: CallCounter = count_calls(client)
        store = DynamoDBStore(STATE, LEDGER, clock=clock, client=self.calls)
        refresh = config.state_refresh_ms / 1000
        self.gw = Gateway(config, store, transport=httpx.MockTransport(answer), clock=clock,
                          health=SharedHealth(store, health_settings(config), clock, refresh),
                          latency=SharedLatency(store, clock, refresh_secs=refresh))
        self.http = TestClient(create_app(config, gateway=self.gw))

    def request(self) -> None:
        r = self.http.post("/v1/chat/completions",
                           headers={"authorization": "Bearer ci-secret"},
                           json={"model": "auto", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 200, r.text
        assert self.gw.writer.flush(timeout=30)


@pytest.fixture
def warm(client: Any, clock: FakeClock) -> Iterator[Instance]:
    inst = Instance(client, clock)
    for _ in range(3):
        inst.request()
    inst.calls.reset()
    yield inst
    inst.gw.writer.close()


def per_request(inst: Instance, clock: FakeClock, n: int, gap_secs: float) -> Counter[str]:
    for _ in range(n):
        clock.advance(gap_secs)
        inst.request()
    return inst.calls.delta()


def test_a_warm_success_costs_two_writes_and_no_read(warm: Instance, clock: FakeClock) -> None:
    # Requests closer together than the refresh and the flush: nothing but the ledger.
    calls = per_request(warm, clock, 20, 0.01)
    assert calls == {"TransactWriteItems": 20, "UpdateItem": 20}  # decision+stats, spend


def test_at_eight_requests_a_second_reads_and_flushes_are_amortised(warm: Instance,
                                                                  clock: FakeClock) -> None:
    calls = per_request(warm, clock, 80, 0.125)  # 10 s of traffic on one instance
    assert calls["TransactWriteItems"] == 80  # one decision each
    assert calls["UpdateItem"] == 80 + 2  # spend each, a latency flush every 5 s
    # Snapshot refreshes once a second: breakers, latency, overrides (Query) and spend
    # (BatchGetItem).
    assert calls["Query"] == 3 * 10
    assert calls["BatchGetItem"] == 10
    assert "Scan" not in calls and "GetItem" not in calls
    assert sum(calls.values()) / 80 == pytest.approx(2.525)
