"""A slow breaker write to a shared store does not stall the gateway (issue 28).

A gateway on DynamoDB (moto) shares its breakers: every counted failure of
an endpoint is a compare-and-set on the state table. Here that table is
slow: each breaker write takes ``DELAY`` longer (a store wrapper built in
the test, as a throttled or distant table would). While a client keeps
sending requests whose endpoint fails, a probe client's requests to a
healthy route must stay as fast as they were before: the breaker writes go
to a thread of their own (``health/shared.py``, ``queued``). Before, each
write ran on the event loop and every request waited ``DELAY`` behind it.
Afterwards every failure is in the table: queued, not lost.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import httpx

from humpyard.clock import SystemClock
from humpyard.config import load_config_text
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store.dynamodb import DynamoDBStore
from tests.support.fake_upstream import FakeUpstream
from tests.support.probe import Probe
from tests.support.servers import ServerThread
from tests.support.steps import ok, status
from tests.unit.aws.moto_support import LEDGER, STATE, moto_tables

DELAY = 0.25  # seconds each breaker write takes beyond DynamoDB's own time
FAILING = 8  # failed calls during the attack: one breaker write each
CHAT = "/v1/chat/completions"


class SlowBreakerWrites(DynamoDBStore):
    """The DynamoDB store whose every breaker write takes ``DELAY`` longer."""

    def put_breaker(self, key: str, state: dict[str, Any],
                    expected_version: int | None) -> tuple[bool, dict[str, Any] | None]:
        time.sleep(DELAY)
        return super().put_breaker(key, state, expected_version)


def config(good: str, bad: str) -> str:
    # A high threshold: every failure is a counted transition, so one write each.
    return f"""
[providers.good]
base_url = "{good}"
[providers.bad]
base_url = "{bad}"
[targets.fine]
endpoints = [{{ provider = "good", model = "m" }}]
[targets.broken]
endpoints = [{{ provider = "bad", model = "m" }}]
[routes.ok]
targets = ["fine"]
[routes.failing]
targets = ["broken"]
[health]
failure_threshold = 1000
"""


def test_a_slow_breaker_write_stalls_no_other_request() -> None:
    with moto_tables() as client, FakeUpstream() as good, FakeUpstream() as bad:
        good.default = ok("pong")
        bad.default = status(500)
        clock = SystemClock()
        store = SlowBreakerWrites(STATE, LEDGER, clock=clock, client=client)
        gw = Gateway(load_config_text(config(good.url, bad.url), env={}), store,
                     clock=clock, rng=random.Random(1))
        with ServerThread(create_app(gw.config, gateway=gw), lifespan="on") as srv, \
                Probe(srv.url, "ok") as probe, httpx.Client(base_url=srv.url,
                                                            timeout=30) as attacker:
            failed: list[int] = []

            def attack() -> None:
                for _ in range(FAILING):
                    r = attacker.post(CHAT, json={"model": "failing", "messages": [
                        {"role": "user", "content": "hi"}]})
                    failed.append(r.status_code)
                    threading.Event().wait(0.05)

            probe.flat_during(attack)
            assert failed and all(s >= 500 for s in failed)
            # Every failure was written, in order, once the queue drained.
            assert gw.health.flush(30)
            stored = store.get_breakers()["bad/m"]
            assert stored["consecutive_failures"] == len(failed)
