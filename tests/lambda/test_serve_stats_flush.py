"""``humpyard serve`` on DynamoDB writes an idle process's stats sums on a timer.

A real ``serve`` child on a moto server with a short ``stats_flush_secs``; the
test reads the stats table through a ``DynamoDBStore`` of its own, as another
process's ``/v1/stats`` does (it sees the table, not the serving process's sums).
"""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import httpx
from lambda_support import SerialMotoServer, gateway_config
from test_serve_on_dynamodb import AWS_ENV, fresh_tables, store_toml

from humpyard.clock import SystemClock
from humpyard.store.dynamodb import DynamoDBStore
from tests.durability.process import ServeProcess
from tests.support import FakeUpstream
from tests.support.polling import until

FLUSH_SECS = 2.0


def _requests_in_table(store: DynamoDBStore) -> int:
    now = time.time()
    return sum(int(g["requests"]) for g in store.stats("route", now - 7200, now + 3600)
               if g["key"] == "auto")


def test_an_idle_process_writes_its_stats_within_stats_flush_secs(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    """Before: stats were flushed only after a decision write, so the requests after
    the last flush stayed in the idle process until more traffic or its close."""
    with FakeUpstream() as primary, FakeUpstream() as backup:
        state, ledger = fresh_tables(moto.url)
        path = tmp_path / "humpyard.toml"
        path.write_text(gateway_config(primary.url, backup.url) + store_toml(
            moto.url, state, ledger, stats_flush_secs=FLUSH_SECS, batch_ms=20))
        client = boto3.client("dynamodb", endpoint_url=moto.url, region_name="us-east-1")
        reader = DynamoDBStore(state, ledger, clock=SystemClock(), client=client)
        with ServeProcess(path, tmp_path / "serve.log", env=AWS_ENV) as proc:
            def chat() -> None:
                r = httpx.post(proc.url + "/v1/chat/completions", timeout=20, json={
                    "model": "auto", "messages": [{"role": "user", "content": "hi"}]})
                assert r.status_code == 200, r.text

            chat()  # the first batch's stats are due at once: written with it
            until(lambda: _requests_in_table(reader) == 1, "the first request's stats")
            chat()
            chat()  # these two within FLUSH_SECS of that flush: summed in the process
            idle_from = time.monotonic()
            until(lambda: _requests_in_table(reader) == 3, "the idle process's stats",
                  timeout=FLUSH_SECS + 5)
            assert time.monotonic() - idle_from < FLUSH_SECS + 5
