"""One warm Lambda instance on moto with every DynamoDB call priced: what a request costs.

``LambdaInstance`` is what a Lambda instance runs: ``build_gateway``
(DynamoDB store, one ``SharedState``, ``SharedHealth``, ``SharedLatency``,
the batched writer) under ``FlushMiddleware`` flushing through
``Instance.flush`` before every response's last byte, with an
``httpx.MockTransport`` upstream. ``WriteUnits`` sits between the store and
moto and records every call, every item written and its write units
(index entries included) and the read units of every read. Requests come
one at a time, as Lambda runs them; the clock is a ``FakeClock`` advanced
between them.

``measure`` gives the per-request figures of a warm instance;
``warm_request_units`` does the whole run on fresh tables (the cost table
in docs/deploy.md is computed from it: tests/lambda/test_lambda_cost.py).
"""

from __future__ import annotations

import io
import json
import logging
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient

from humpyard.aws.build import Instance, build_gateway
from humpyard.aws.env import LambdaEnv
from humpyard.aws.flush import FlushMiddleware
from humpyard.clock import FakeClock
from humpyard.http.app import create_app
from tests.unit.aws.moto_support import LEDGER, STATE, moto_tables
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
        app = FlushMiddleware(create_app(self.gw.config, gateway=self.gw), self.instance.flush,
                              now=clock.now)
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



def start(client: Any, clock: FakeClock, path: Path, config: str = BUDGETED) -> LambdaInstance:
    """A warm instance: three requests 1.1 s apart have paid the cold-start reads (the
    whole latency window, the overrides); its write counts start from zero."""
    inst = LambdaInstance(client, clock, path, config)
    for _ in range(3):
        clock.advance(1.1)
        inst.request()
    inst.writes.reset()
    return inst


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



def warm_request_units(config: str, *, n: int = 100, gap_secs: float = 1.1) -> dict[str, Any]:
    """``measure`` on fresh moto tables and a fresh warm instance (no pytest fixtures)."""
    clock = FakeClock()
    with moto_tables() as client, tempfile.TemporaryDirectory() as tmp:
        inst = start(client, clock, Path(tmp) / "humpyard.toml", config)
        try:
            return measure(inst, clock, n, gap_secs)
        finally:
            inst.close()
