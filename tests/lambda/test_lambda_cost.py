"""What a warm request costs the operator outside DynamoDB: log bytes and Lambda time.

One warm gateway instance in process (moto for DynamoDB and Secrets
Manager, a ``FakeUpstream`` on loopback), requests 1.1 s apart on a
``FakeClock`` as in docs/deploy.md's cost table. Measured per request and
printed (the figures docs/deploy.md quotes): bytes the function writes to
CloudWatch Logs (EMF records and JSON log lines), wall and CPU time of the
handler, and the part of the wall time spent inside DynamoDB calls (moto
here; the real service's round trips replace it in AWS).

Asserted: gauges go out once per ``HUMPYARD_GAUGE_INTERVAL_SECS``, not per
request, and a warm request's log bytes stay within the budget the cost
goal leaves for logs. Times are printed, never asserted.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from lambda_support import APP_KEY, LEDGER, OPS_KEY, STATE, LambdaContext, event, gateway_config
from moto import mock_aws

from humpyard.aws.build import Instance
from humpyard.aws.clients import session
from humpyard.clock import FakeClock
from humpyard.store.dynamodb import create_tables
from tests.support import FakeUpstream

# ~1.7 KB of EMF and one request log line; with Lambda's own START/END/REPORT lines
# (~0.35 KB) that is about $1 per million requests at $0.50 per GB ingested.
LOG_BYTES_BUDGET = 2048


class DynamoDBTimer:
    """Wall and CPU time spent inside DynamoDB calls (moto's work, in the calling thread),
    from botocore's before/after-call events."""

    def __init__(self) -> None:
        self.seconds = self.cpu_seconds = 0.0
        self._started: dict[int, tuple[float, float]] = {}

    def before(self, **_: Any) -> None:
        self._started[threading.get_ident()] = (time.perf_counter(), time.thread_time())

    def after(self, **_: Any) -> None:
        started = self._started.pop(threading.get_ident(), None)
        if started is not None:
            self.seconds += time.perf_counter() - started[0]
            self.cpu_seconds += time.thread_time() - started[1]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, str]]:
    """moto tables and keys secret, upstreams on loopback: the environment of a function."""
    with FakeUpstream() as primary, FakeUpstream() as backup, mock_aws():
        create_tables(boto3.client("dynamodb"), STATE, LEDGER)
        secret = boto3.client("secretsmanager").create_secret(
            Name="keys", SecretString=json.dumps({"APP_KEY": APP_KEY, "OPS_KEY": OPS_KEY}))
        config = tmp_path / "humpyard.toml"
        config.write_text(gateway_config(primary.url, backup.url, refresh_ms=1000, keys=True))
        yield {"HUMPYARD_STATE_TABLE": STATE, "HUMPYARD_LEDGER_TABLE": LEDGER,
               "HUMPYARD_CONFIG": str(config), "HUMPYARD_SECRETS_ARN": secret["ARN"]}


@pytest.fixture
def timer() -> Iterator[DynamoDBTimer]:
    made = DynamoDBTimer()
    session().register("before-call.dynamodb", made.before, unique_id="cost-before")
    session().register("after-call.dynamodb", made.after, unique_id="cost-after")
    try:
        yield made
    finally:
        session().unregister("before-call.dynamodb", unique_id="cost-before")
        session().unregister("after-call.dynamodb", unique_id="cost-after")


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _gauges(docs: list[dict[str, Any]]) -> set[str]:
    names = {"humpyard_overrides_active", "humpyard_override_oldest_age_seconds",
             "humpyard_target_latency_seconds", "humpyard_endpoint_state",
             "humpyard_budget_spend_usd", "humpyard_quota_percent"}
    return {m["Name"] for d in docs if "_aws" in d
            for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]} & names


def test_a_warm_request_in_log_bytes_and_lambda_time(
        stack: dict[str, str], timer: DynamoDBTimer, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    instance = Instance.build(stack, clock=clock)  # here: its streams are the test's output
    try:
        _measure(instance, clock, timer, capsys)
    finally:
        instance.close()


def _measure(instance: Instance, clock: FakeClock, timer: DynamoDBTimer,
             capsys: pytest.CaptureFixture[str]) -> None:
    first = instance.http(event("chat_post"), LambdaContext())
    assert first["statusCode"] == 200, first["body"]
    assert _gauges(_lines(capsys.readouterr().out))  # an instance's first flush has them
    rows = []
    for _ in range(60):
        clock.advance(1.1)
        dynamodb_before, dynamodb_cpu_before = timer.seconds, timer.cpu_seconds
        wall, cpu = time.perf_counter(), time.process_time()
        answer = instance.http(event("chat_post"), LambdaContext())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert answer["statusCode"] == 200
        out = capsys.readouterr().out
        docs = _lines(out)
        rows.append({"bytes": len(out.encode()), "wall_ms": wall * 1000, "cpu_ms": cpu * 1000,
                     "dynamodb_ms": (timer.seconds - dynamodb_before) * 1000,
                     "own_cpu_ms": (cpu - (timer.cpu_seconds - dynamodb_cpu_before)) * 1000,
                     "emf": sum("_aws" in d for d in docs),
                     "gauges": _gauges(docs), "counted": any(
                         "humpyard_requests_total" in d for d in docs)})
    assert all(r["counted"] for r in rows)  # counters go out with every request
    # 1.1 s apart, gauges go out once a minute: with the 55th request (60.5 s after the first)
    assert [i for i, r in enumerate(rows) if r["gauges"]] == [54]
    quiet = [r for r in rows if not r["gauges"]]
    median = {k: statistics.median(r[k] for r in quiet)
              for k in ("bytes", "emf", "wall_ms", "cpu_ms", "dynamodb_ms", "own_cpu_ms")}
    with capsys.disabled():
        print(f"\nwarm request, 1.1 s apart (median of {len(quiet)}): "
              f"{median['bytes']:.0f} log bytes in {median['emf']:.0f} EMF records + 1 log line; "
              f"handler {median['wall_ms']:.1f} ms wall, {median['cpu_ms']:.1f} ms CPU, "
              f"of which {median['dynamodb_ms']:.1f} ms inside DynamoDB calls (moto); "
              f"CPU outside them {median['own_cpu_ms']:.1f} ms")
    assert median["bytes"] <= LOG_BYTES_BUDGET, median
