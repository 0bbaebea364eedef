"""Two Lambda instances (the real wiring) over one moto DynamoDB share a key's budget.

A $0.01 budget and requests whose worst case is $0.008: while the first
request is in flight on instance A, a request on instance B must be refused
(``budget_exhausted``) — before leases B planned on its own view (A's
reservation is A's alone, its spend not written yet) and served it too.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from humpyard.clock import FakeClock
from tests.unit.aws.lambda_pair import HeldUpstream, clients, lambda_instances
from tests.unit.aws.moto_support import STATE

CONFIG = """
state_refresh_ms = 1000
[providers.p]
base_url = "http://p.test/v1"
[targets.t]
endpoints = [{ provider = "p", model = "m", price = { input = 100.0, output = 100.0 } }]
[routes.r]
type = "passthrough"
targets = ["t"]
[keys.k]
key_env = "KEY"
budget = { usd = 0.01, period = "day" }
"""


def test_a_budget_is_shared_by_two_lambda_instances(client: Any, clock: FakeClock,
                                                    tmp_path: Path) -> None:
    up = HeldUpstream({"prompt_tokens": 40, "completion_tokens": 40, "total_tokens": 80})
    instances = lambda_instances(client, clock, tmp_path, CONFIG, up)
    body = {"model": "r", "max_tokens": 45, "messages": [{"role": "user", "content": "x"}]}

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        a, b = clients(instances)
        first = asyncio.create_task(a.post("/v1/chat/completions", json=body))
        await asyncio.wait_for(up.arrived.wait(), 10)
        # A's request is in flight: B must answer at once (a request B served would wait
        # for the upstream that only answers after B did: the timeout fails the test)
        second = await asyncio.wait_for(b.post("/v1/chat/completions", json=body), 5)
        up.release.set()
        done = await first
        third = await b.post("/v1/chat/completions", json=body)  # $0.008 spent: no room
        await a.aclose()
        await b.aclose()
        return done, second, third

    done, second, third = asyncio.run(run())
    for inst, _ in instances:
        inst.close()
    assert done.status_code == 200, done.text
    for refused in (second, third):
        assert refused.status_code == 429, refused.text
        assert json.loads(refused.text)["error"]["code"] == "budget_exhausted"
    item = client.get_item(TableName=STATE, Key={"pk": {"S": "spend#k"},
                                                 "sk": {"S": _period(clock)}})["Item"]
    assert float(item["usd"]["N"]) == 0.008
    assert not [n for n in item if n.startswith("l_")]  # both gave their lease back


def _period(clock: FakeClock) -> str:
    from humpyard.ledger.periods import period_key
    return period_key("day", clock.now())
