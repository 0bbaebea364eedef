"""Partition heat: no DynamoDB partition key takes more than ~500 WCU/s at 1,000 requests/s.

Ten Lambda instances, each the real wiring (``build_gateway`` under
``FlushMiddleware`` flushing before the last byte), share one moto
DynamoDB behind ``WriteUnits``, which records every item and index entry
written with its write units. They serve 2,000 chat requests, 200 each, one
at a time each, 1.1 s apart per instance (the cadence of the per-request
cost test), then shut down (their last stats and latency flush count too).

That is ``make soak`` (``HUMPYARD_HEAT=full``). ``make test`` runs three
instances, each serving its 200 requests over the same simulated minutes
(600 in all): an instance's writes (its stats flushes, lease renewals,
decisions, last flush) follow its own requests and clock, not the number
of its peers, so the writes per request, and so the heat, are the same;
only the run is shorter.

Traffic is spread over 100 routes and 10 keys with Zipf(1) popularity (the
busiest route gets ~19% of requests, the busiest key ~34%), 20 targets on
5 providers, every key with a budget and every answer priced, so spend is
written with every request.

Units per partition key ÷ requests × 1,000 is the partition's WCU/s at
1,000 requests/s. The table of the hottest is printed (it is the table in
docs/decisions/0002-dynamodb-layout.md) and the test fails above
``BOUND``.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from humpyard.aws.build import Instance, build_gateway
from humpyard.aws.env import LambdaEnv
from humpyard.aws.flush import FlushMiddleware
from humpyard.clock import FakeClock
from humpyard.http.app import create_app
from tests.support.fresh_stack import on_fresh_stack
from tests.unit.aws.moto_support import LEDGER, STATE
from tests.unit.aws.write_units import WriteUnits

BOUND = 500.0  # WCU/s per partition key at 1,000 requests/s
RATE = 1000
FULL = os.environ.get("HUMPYARD_HEAT") == "full"  # make soak
INSTANCES = 10 if FULL else 3
PER_INSTANCE = 200
REQUESTS = INSTANCES * PER_INSTANCE
GAP_SECS = 1.1
ROUTES, TARGETS, PROVIDERS, KEYS = 100, 20, 5, 10


def zipf(n: int) -> list[float]:
    return [1 / (i + 1) for i in range(n)]


def config() -> str:
    lines = ["state_refresh_ms = 1000"]
    for p in range(PROVIDERS):
        lines += [f"[providers.p{p}]", f'base_url = "http://p{p}.test/v1"']
    for t in range(TARGETS):
        lines += [f"[targets.t{t:02d}]",
                  f'endpoints = [{{ provider = "p{t % PROVIDERS}", model = "m{t}", '
                  f"price = {{ input = 1.0, output = 2.0 }} }}]"]
    for r in range(ROUTES):
        lines += [f"[routes.r{r:03d}]", 'type = "passthrough"',
                  f'targets = ["t{r % TARGETS:02d}", "t{(r + 1) % TARGETS:02d}"]']
    for k in range(KEYS):
        lines += [f"[keys.k{k}]", f'key_env = "KEY_{k}"',
                  'budget = { usd = 1000.0, period = "day" }']
    return "\n".join(lines) + "\n"


def answer(request: httpx.Request) -> httpx.Response:
    model = json.loads(request.content)["model"]
    return httpx.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 120, "total_tokens": 1020}})


def heat_table(heat: dict[tuple[str, str], int], requests: int, top: int = 12) -> str:
    rows = sorted(heat.items(), key=lambda kv: -kv[1])[:top]
    lines = ["| partition (table or table/index: key) | WCU/s at 1,000 req/s |", "|---|---|"]
    for (table, pk), units in rows:
        where = table.replace(STATE, "state").replace(LEDGER, "ledger")
        lines.append(f"| `{where}: {pk}` | {units / requests * RATE:.0f} |")
    return "\n".join(lines)


def run_heat(client: Any, clock: FakeClock, tmp_path: Path, *, text: str, instances: int,
             transport: httpx.MockTransport, routes: list[int], keys: list[int],
             allowed: frozenset[int] = frozenset({200}), gap: float = GAP_SECS) -> WriteUnits:
    """Serve one request per entry of ``routes``/``keys`` round-robin over ``instances``
    Lambda instances on one (moto) DynamoDB; the billed writes."""
    path = tmp_path / "humpyard.toml"
    path.write_text(text)
    env = LambdaEnv.from_environ({"HUMPYARD_STATE_TABLE": STATE, "HUMPYARD_LEDGER_TABLE": LEDGER,
                                  "HUMPYARD_CONFIG": str(path)})
    writes = WriteUnits(client, STATE, LEDGER)
    secrets = {f"KEY_{k}": f"key-{k}-secret" for k in range(KEYS)}
    served = []
    for _ in range(instances):
        gw = build_gateway(env, dynamodb=writes, clock=clock, environ=secrets,
                           transport=transport)
        inst = Instance(env=env, gateway=gw, logger=logging.getLogger("tests.heat"),  # type: ignore[arg-type]
                        stdout=io.StringIO())
        served.append((inst, FlushMiddleware(create_app(gw.config, gateway=gw), inst.flush)))

    async def serve() -> None:
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw")
                   for _, app in served]
        for i, (route, key) in enumerate(zip(routes, keys, strict=True)):
            clock.advance(gap / instances)  # so each instance sees ``gap`` between its own
            r = await clients[i % instances].post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer key-{key}-secret"},
                json={"model": f"r{route:03d}",
                      "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code in allowed, r.text
        for c in clients:
            await c.aclose()

    def serve_and_close() -> None:
        asyncio.run(serve())
        for inst, _ in served:
            inst.close()  # the last flush of stats and latency: billed like the rest

    on_fresh_stack(serve_and_close)  # 220 s under pytest otherwise (tests/support/fresh_stack.py)
    return writes


def report(writes: WriteUnits, requests: int, instances: int, what: str) -> tuple[float, str]:
    heat = writes.heat()
    table = heat_table(heat, requests)
    units = writes.total_units() / requests
    reads = sum(n for op, n in writes.calls.items() if op in ("GetItem", "BatchGetItem", "Query"))
    print(f"\nPartition heat{what}: {requests} requests on {instances} instances, per request "
          f"{units:.2f} write units, {writes.items() / requests:.2f} items written, "
          f"{reads / requests:.2f} read calls, "
          f"{writes.read_units / requests:.2f} read units; the hottest partition keys:"
          f"\n{table}")
    return max(heat.values()) / requests * RATE, table


def test_no_partition_key_runs_hot(client: Any, clock: FakeClock, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(17)
    routes = rng.choices(range(ROUTES), zipf(ROUTES), k=REQUESTS)
    keys = rng.choices(range(KEYS), zipf(KEYS), k=REQUESTS)
    writes = run_heat(client, clock, tmp_path, text=config(), instances=INSTANCES,
                      transport=httpx.MockTransport(answer), routes=routes, keys=keys)
    with capsys.disabled():
        hottest, table = report(writes, REQUESTS, INSTANCES, "")
    assert hottest <= BOUND, table
    # The shape the bound rests on: every decision is one item, no index entry (ADR 0019),
    # on the shards of its day.
    decisions = [w for w in writes.writes if w.table == LEDGER and not w.index]
    assert len(decisions) == REQUESTS
    assert not any(w.table.startswith(LEDGER + "/") for w in writes.writes)
    assert len({w.partition for w in decisions}) >= 4


FAILING_INSTANCES = 40
# Busy instances: ten requests each within one state refresh (1 s), so an instance keeps
# meeting the dead provider until it learns of the trip.
BUSY_GAP_SECS = 0.1
# make soak: 50 each (2,000 requests, 5 simulated seconds). make test serves the first
# 25 each of the same requests: every failed call and live-item write falls in the
# first 2.5 s (the same 56 and 56 either way); the cut only drops requests that
# dilute the heat, so the heat measured is higher (spend#k0 ~320 against ~160), the
# bound the same. Fewer instances would not do: how often two instances' breaker
# writes collide before the trip depends on how many race (12 instances made 43
# live-item writes for 40 failed calls).
FAILING_PER_INSTANCE = 50 if FULL else 25
FAILING_REQUESTS = FAILING_INSTANCES * FAILING_PER_INSTANCE


FAILED_CALLS: list[str] = []


def dead_p0(request: httpx.Request) -> httpx.Response:
    """Provider p0 is down (every call a 500); the others answer."""
    if request.url.host == "p0.test":
        FAILED_CALLS.append(request.url.host)
        return httpx.Response(500, json={"error": {"message": "down"}})
    return answer(request)


def test_a_failing_primary_and_a_budgeted_key_heat_no_item(client: Any, clock: FakeClock,
                                                       tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    # Every request's first target is on the dead provider, so each instance meets the
    # failure until it learns of the trip; the breaker (the live item) is written for
    # the failures that trip it and the probes, not for every failed call.
    # Every request is also on one budgeted key (issue 26's done-when: a failing primary
    # and a budgeted key at once): its spend goes with its budget lease, not per request.
    rng = random.Random(5)
    routes = [r for r in range(ROUTES) if r % TARGETS % PROVIDERS == 0]
    picked = rng.choices(routes, k=FAILING_REQUESTS)
    keys = [0] * FAILING_REQUESTS
    FAILED_CALLS.clear()
    writes = run_heat(client, clock, tmp_path, text=config(), instances=FAILING_INSTANCES,
                      transport=httpx.MockTransport(dead_p0), routes=picked, keys=keys,
                      gap=BUSY_GAP_SECS)
    live = [w for w in writes.writes if w.table == STATE and w.partition == "live"]
    with capsys.disabled():
        hottest, table = report(writes, FAILING_REQUESTS, FAILING_INSTANCES,
                                " (a failing primary)")
        print(f"{len(FAILED_CALLS)} failed calls to the dead provider; {len(live)} writes "
              f"({sum(w.units for w in live)} units) of the live item")
    assert hottest <= BOUND, table
    # A failure while the endpoint cools down writes nothing (an instance that has not
    # seen the trip learns of it from one refused write): never more writes than failures.
    assert FAILED_CALLS
    assert len(live) <= len(FAILED_CALLS), (
        f"{len(live)} live-item writes for {len(FAILED_CALLS)} failures")
    spend = sum(w.units for w in writes.writes if w.partition == "spend#k0")
    assert 0 < spend / FAILING_REQUESTS * RATE <= BOUND, table
