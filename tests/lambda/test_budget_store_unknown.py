"""A budget on ``[store] backend = "dynamodb"`` when the store has never answered.

A ``serve`` process started while DynamoDB could not be reached admitted a
budgeted key as though it had spent nothing: eleven requests of a key with
$0.025 left were served, about $0.165 of upstream cost. Without a read of the
key's spend nor a lease write answered, its budget cannot be checked: the
request is planned as for a spent budget (a free target serves it) or refused
503 ``store_unavailable``; once the store answers, the budget is counted as
before. A process that has read the spend keeps admitting on its own view during
an outage (``test_serve_on_dynamodb.py`` covers the outage after a read).
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.support import FakeUpstream, ok

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
PRICED = ", price = { input = 1.0, output = 1.0 }"


def _closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp: Path, paid: str, free: str) -> Path:
    path = tmp / "humpyard.toml"
    path.write_text(f"""
[providers.paid]
base_url = "{paid}"
[providers.free]
base_url = "{free}"
[targets.paid]
endpoints = [{{ provider = "paid", model = "m"{PRICED} }}]
[targets.free]
endpoints = [{{ provider = "free", model = "m" }}]
[routes.paid_only]
targets = ["paid"]
[routes.paid_then_free]
targets = ["paid", "free"]
[keys.app]
key_env = "APP_KEY"
budget = {{ usd = 1.0, period = "day" }}
[store]
backend = "dynamodb"
state_table = "never-read-state"
ledger_table = "never-read-ledger"
region = "us-east-1"
endpoint_url = "http://127.0.0.1:{_closed_port()}"
""")
    return path


def _chat(proc: ServeProcess, model: str) -> httpx.Response:
    return httpx.post(proc.url + "/v1/chat/completions", timeout=30,
                      headers={"authorization": "Bearer hk-app-never-read"},
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def test_a_budget_the_store_never_told_is_not_taken_for_unspent(tmp_path: Path) -> None:
    with FakeUpstream() as paid, FakeUpstream() as free:
        paid.default, free.default = ok("paid"), ok("free")
        proc = ServeProcess(_config(tmp_path, paid.url, free.url), tmp_path / "serve.log",
                            env={**AWS_ENV, "APP_KEY": "hk-app-never-read"}).start(30)
        try:
            refused = [_chat(proc, "paid_only") for _ in range(3)]
            assert [r.status_code for r in refused] == [503] * 3, refused[0].text
            body = refused[0].json()["error"]
            assert body["code"] == "store_unavailable"
            assert "budget of key app cannot be checked" in body["message"]
            assert refused[0].headers["retry-after"] == "5"
            served = _chat(proc, "paid_then_free")  # a free target needs no budget
            assert served.status_code == 200 and served.headers["x-humpyard-target"] == "free"
            assert paid.requests_to("/v1/chat/completions") == []
        finally:
            proc.stop()
        assert "Traceback" not in proc.output()
