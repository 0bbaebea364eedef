"""``humpyard serve`` processes on ``[store] backend = "dynamodb"``, sharing one moto server.

Each ``ServeProcess`` is a real ``humpyard serve`` child with dummy AWS
credentials and ``[store] endpoint_url`` pointing at a moto server on
loopback; the upstreams are ``FakeUpstream`` servers. What one process learns
(a tripped breaker, an override, spend) the other honours within a refresh;
decisions written by either are listed by both; the probe lease holds across
processes; and decisions are written in batches (the moto server counts the
calls by operation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from lambda_support import SerialMotoServer, gateway_config

from humpyard.store.dynamodb import create_tables
from tests.durability.process import ROOT, ServeProcess
from tests.support import FakeUpstream, delay, ok, status
from tests.support.polling import until

REFRESH_MS = 200
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
KEYS = {"APP_KEY": "hk-app-fleet-key", "OPS_KEY": "hk-ops-fleet-key"}
KEYS_TOML = """
[keys.app]
key_env = "APP_KEY"
budget = { usd = 1.5, period = "day" }

[keys.ops]
key_env = "OPS_KEY"
admin = true
manage_overrides = true
"""
WRITES = ("PutItem", "BatchWriteItem", "UpdateItem", "TransactWriteItems", "DeleteItem")


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as primary, FakeUpstream() as backup:
        backup.default = ok("from backup")
        yield primary, backup


def fresh_tables(moto_url: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    state, ledger = f"state-{suffix}", f"ledger-{suffix}"
    create_tables(boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1",
                               aws_access_key_id="testing", aws_secret_access_key="testing"),
                  state, ledger)
    return state, ledger


def store_toml(moto_url: str, state: str, ledger: str, **extra: Any) -> str:
    lines = ['[store]', 'backend = "dynamodb"', f'state_table = "{state}"',
             f'ledger_table = "{ledger}"', 'region = "us-east-1"',
             f'endpoint_url = "{moto_url}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n" + "\n".join(lines) + "\n"


Fleet = Callable[..., list[ServeProcess]]


@pytest.fixture
def fleet(moto: SerialMotoServer, tmp_path: Path,
          upstreams: tuple[FakeUpstream, FakeUpstream]) -> Iterator[Fleet]:
    """``fleet(n=2, keys=False, store={...}, **gateway_config)``: n ``serve`` processes on
    fresh tables (``keys``: True for ``KEYS_TOML``, or the keys' own TOML)."""
    with ExitStack() as stack:
        def start(n: int = 2, *, keys: bool | str = False,
                  store: dict[str, Any] | None = None, **config: Any) -> list[ServeProcess]:
            state, ledger = fresh_tables(moto.url)
            primary, backup = upstreams
            path = tmp_path / f"humpyard-{state}.toml"
            path.write_text(gateway_config(primary.url, backup.url, **config)
                            + (keys if isinstance(keys, str) else KEYS_TOML if keys else "")
                            + store_toml(moto.url, state, ledger, **(store or {})))
            procs = [ServeProcess(path, tmp_path / f"serve-{state}-{i}.log",
                                  env={**AWS_ENV, **KEYS}) for i in range(n)]
            with ThreadPoolExecutor(n) as pool:  # both start at once
                for p in pool.map(lambda p: p.start(30), procs):
                    stack.callback(p.stop)
            return procs
        yield start


def chat(proc: ServeProcess, key: str | None = None, *, expect: int = 200) -> httpx.Response:
    """One chat; its status must be ``expect`` (0: any)."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(proc.url + "/v1/chat/completions", headers=headers, timeout=20,
                   json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
    assert not expect or r.status_code == expect, r.text
    return r


def admin(proc: ServeProcess, method: str, path: str, **kw: Any) -> httpx.Response:
    r = httpx.request(method, proc.url + path, timeout=20,
                      headers={"authorization": f"Bearer {KEYS['OPS_KEY']}"}, **kw)
    assert r.status_code < 300, r.text
    return r


def chat_calls(up: FakeUpstream) -> int:
    return len(up.requests_to("/v1/chat/completions"))


def states(proc: ServeProcess) -> dict[str, str]:
    body = httpx.get(proc.url + "/v1/health", timeout=10).json()
    return {e["target"] + "/" + e["provider"]: e["state"] for e in body["endpoints"]}


def test_a_dead_upstream_met_by_one_process_is_skipped_by_the_other_and_probed_once(
        fleet: Fleet, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    primary, _ = upstreams
    cooldown = 4.0  # room for b to see the trip on a busy machine
    a, b = fleet(refresh_ms=REFRESH_MS, cooldown_secs=cooldown, spare_endpoint=True)
    assert chat(a).headers["x-humpyard-provider"] == "up1"
    assert chat(b).headers["x-humpyard-provider"] == "up1"

    primary.script(status(500))
    tripped_at = time.monotonic()
    assert chat(a).headers["x-humpyard-provider"] == "up2"  # a met it, tripped, failed over
    tripped = chat_calls(primary)

    until(lambda: states(b).get("primary/up1") == "cooling_down", "b to see the breaker")
    assert chat(b).headers["x-humpyard-provider"] == "up2"
    assert chat_calls(primary) == tripped  # b never tried the dead endpoint
    assert time.monotonic() - tripped_at < cooldown  # all of it within the cooldown

    time.sleep(max(0.0, tripped_at + cooldown + REFRESH_MS / 1000 * 2 - time.monotonic()))
    primary.script(delay(1.5, ok("probe answered")))  # still out when the other one asks
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(chat, (a, b)))
    assert chat_calls(primary) == tripped + 1  # one probe between the two processes
    assert sorted(r.headers["x-humpyard-provider"] for r in answers) == ["up1", "up2"]
    until(lambda: states(b).get("primary/up1") == "healthy", "b to see the probe's success")


def test_decisions_stats_overrides_and_spend_are_shared(
        fleet: Fleet, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    primary, _ = upstreams
    a, b = fleet(refresh_ms=REFRESH_MS, keys=True, store={"stats_flush_secs": 0})

    # The ledger: decisions written by either process are listed by both.
    ids = {chat(p, KEYS["OPS_KEY"]).headers["x-humpyard-request-id"] for p in (a, b, a)}

    def listed(proc: ServeProcess) -> set[str]:
        got = admin(proc, "GET", "/v1/decisions", params={"limit": 100}).json()
        return {d["request_id"] for d in got["decisions"]}
    for proc in (a, b):
        until(lambda proc=proc: ids <= listed(proc), f"{proc.url} to list every decision")
    one = admin(b, "GET", f"/v1/decisions/{sorted(ids)[0]}").json()
    assert one["target"] == "primary"

    # Stats: the same totals through either process, once both have written theirs.
    def requests(proc: ServeProcess) -> int:
        groups = admin(proc, "GET", "/v1/stats", params={"group_by": "route"}).json()["groups"]
        return sum(g["requests"] for g in groups if g["key"] == "auto")
    until(lambda: requests(a) == requests(b) == 3, "both processes' stats to say 3")

    # Overrides: created through one, honoured and removed through the other.
    created = admin(a, "POST", "/v1/overrides", json={
        "kind": "disable_target", "subject": "primary", "reason": "INC-1",
        "expires_in_secs": 600}).json()
    before = chat_calls(primary)
    until(lambda: any(o["id"] == created["id"] for o in admin(
        b, "GET", "/v1/overrides").json()["overrides"]), "b to list the override")
    time.sleep(REFRESH_MS / 1000 * 2)  # b's routing view is at most one refresh old
    assert chat(b, KEYS["OPS_KEY"]).headers["x-humpyard-target"] == "backup"
    assert chat_calls(primary) == before
    admin(b, "DELETE", f"/v1/overrides/{created['id']}")
    until(lambda: chat(a, KEYS["OPS_KEY"]).headers["x-humpyard-target"] == "primary",
          "a to route to primary again")

    # Spend: $1 a request (the upstream reports a million prompt tokens at $1 per
    # million, far past the few the request's reservation expected) against a $1.50
    # budget; one request through each process exhausts it for both, so both route the
    # key to the free target only (a budget removes priced targets).
    primary.default = ok("priced", usage={"prompt_tokens": 1_000_000, "completion_tokens": 0,
                                          "total_tokens": 1_000_000})
    chat(a, KEYS["APP_KEY"])
    chat(b, KEYS["APP_KEY"])  # b's own count is $1: under the budget on its own

    def spent(proc: ServeProcess) -> float:
        text = admin(proc, "GET", "/metrics").text
        line = next((x for x in text.splitlines()
                     if x.startswith('humpyard_budget_spend_usd{key="app"}')), "")
        return float(line.rsplit(" ", 1)[1]) if line else 0.0
    # the spend goes to the table with the lease (at most every 10 s an instance)
    until(lambda: spent(a) >= 2.0 and spent(b) >= 2.0, "both processes to count $2",
          timeout=30.0)
    before = chat_calls(primary)
    for proc in (a, b):
        assert chat(proc, KEYS["APP_KEY"]).headers["x-humpyard-target"] == "backup"
    assert chat_calls(primary) == before


def test_dynamodb_calls_per_request_at_steady_load(
        fleet: Fleet, moto: SerialMotoServer, capsys: pytest.CaptureFixture[str]) -> None:
    """The write calls of ``serve`` on DynamoDB: decisions go 25 to a ``BatchWriteItem``,
    so at a steady load a process makes fewer write calls than it serves requests.
    Printed for docs/operations.md (run with -s)."""
    (a,) = fleet(1, refresh_ms=1000)
    for _ in range(5):
        chat(a)  # warm: breakers known, the first reads done
    until(lambda: _metric(a, "humpyard_ledger_batch_size_sum") >= 5, "the warm-up written")
    until(lambda: _quiet(moto, "Query"), "the start's override sweep to end", timeout=30)
    moto.calls.clear()
    n, clients = 200, 20
    started = time.monotonic()
    with httpx.Client(timeout=20) as http, ThreadPoolExecutor(clients) as pool:
        def one(_: int) -> int:
            return http.post(a.url + "/v1/chat/completions", json={
                "model": "auto", "messages": [{"role": "user", "content": "hi"}]}).status_code
        assert set(pool.map(one, range(n))) == {200}
    elapsed = time.monotonic() - started
    # Written when the writer's batches hold every decision (its own histogram says).
    until(lambda: _metric(a, "humpyard_ledger_batch_size_sum") >= n, "every decision written",
          timeout=15)
    calls = dict(moto.calls)
    batches = _metric(a, "humpyard_ledger_batch_size_count")
    writes = sum(calls.get(op, 0) for op in WRITES)
    assert calls.get("PutItem", 0) == 0, calls  # no decision is written on its own
    assert writes < n / 2, calls  # 25 decisions a call, when they come together
    assert _listed(a) >= n + 5  # and every one of them is there
    with capsys.disabled():
        print(f"\nserve on DynamoDB: {n} requests in {elapsed:.1f} s ({n / elapsed:.0f}/s, "
              f"{clients} clients), {batches:.0f} writer batches: {writes} write calls "
              f"({writes / n:.3f} a request); every call: {calls}")


def _limited(limit: str) -> str:
    return f"""
[keys.app]
key_env = "APP_KEY"
{limit}
"""


def test_rpm_limit_refuses_the_sixth_request_on_either_machine(fleet: Fleet) -> None:
    """Before limit blocks on DynamoDB each process counted alone: 7 of 7 served."""
    a, b = fleet(keys=_limited("rpm_limit = 5"))
    if time.time() % 60 > 50:  # all seven in one clock minute
        time.sleep(61 - time.time() % 60)
    sent = [chat((a, b)[i % 2], KEYS["APP_KEY"], expect=200 if i < 5 else 429)
            for i in range(7)]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in sent] == \
        ["4", "3", "2", "1", "0", "0", "0"]
    assert all(r.json()["error"]["code"] == "rate_limit_exceeded" for r in sent[5:])


def test_max_parallel_requests_holds_across_machines(
        fleet: Fleet, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    """One slow request in flight on each process: a third is refused on either; a slot
    freed on one process is given back by its upkeep and served on the other."""
    primary, _ = upstreams
    a, b = fleet(keys=_limited("max_parallel_requests = 2"))
    primary.script(delay(3.0, ok("slow")), delay(3.0, ok("slow")))
    with ThreadPoolExecutor(2) as pool:
        slow = [pool.submit(chat, p, KEYS["APP_KEY"]) for p in (a, b)]
        until(lambda: len(primary.requests_to("/v1/chat/completions")) == 2, "both in flight")
        for proc in (a, b):
            refused = chat(proc, KEYS["APP_KEY"], expect=429)
            assert "max_parallel_requests is 2" in refused.json()["error"]["message"]
        assert [f.result().status_code for f in slow] == [200, 200]
    until(lambda: _in_flight(b) == 0, "a's upkeep to give its free slot back")
    primary.script(delay(1.0, ok("slow")), delay(1.0, ok("slow")))
    with ThreadPoolExecutor(2) as pool:  # both slots are b's to take now
        assert [r.status_code for r in pool.map(lambda p: chat(p, KEYS["APP_KEY"]), (b, b))] \
            == [200, 200]


def test_a_burst_on_two_machines_gets_exactly_max_parallel_requests_served(
        fleet: Fleet, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    """24 requests at once, half on each process, every one slow enough to overlap the
    others: exactly max_parallel_requests = 4 reach the upstream, the rest are refused;
    afterwards every slot comes back and 4 at once are served again."""
    primary, _ = upstreams
    a, b = fleet(keys=_limited("max_parallel_requests = 4"))
    primary.default = delay(2.0, ok("slow"))

    def burst(n: int) -> list[int]:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(
                lambda i: chat((a, b)[i % 2], KEYS["APP_KEY"], expect=0).status_code, range(n)))

    codes = burst(24)
    assert sorted(codes) == [200] * 4 + [429] * 20, codes
    assert len(primary.requests_to("/v1/chat/completions")) == 4
    until(lambda: _in_flight(a) == 0 and _in_flight(b) == 0, "every slot given back")
    assert burst(4) == [200] * 4


def _in_flight(proc: ServeProcess) -> int:
    r = httpx.post(proc.url + "/v1/route/explain", json={"model": "auto"}, timeout=20,
                   headers={"authorization": f"Bearer {KEYS['APP_KEY']}"})
    assert r.status_code == 200, r.text
    return int(r.json()["limits"]["in_flight"])


def _quiet(moto: SerialMotoServer, op: str, secs: float = 0.5) -> bool:
    """No ``op`` call for ``secs`` (a process walks the retention days when it starts)."""
    before = moto.calls[op]
    time.sleep(secs)
    return moto.calls[op] == before


def _metric(proc: ServeProcess, name: str) -> float:
    for line in httpx.get(proc.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _listed(proc: ServeProcess) -> int:
    got = httpx.get(proc.url + "/v1/decisions", params={"limit": 500}, timeout=20).json()
    return len(got["decisions"])


def test_workers_share_the_tables_and_make_no_sqlite_file(
        moto: SerialMotoServer, tmp_path: Path,
        upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    """``serve --workers 2`` on DynamoDB: each worker opens the tables as one ``serve``
    does (before, the workers fell back to the ``[ledger] path`` SQLite file and shared
    nothing with other machines): a breaker one worker trips is honoured by the other,
    and every decision is in the ledger table, none in a file."""
    primary, _ = upstreams
    state, ledger = fresh_tables(moto.url)
    never = tmp_path / "never.db"
    path = tmp_path / "humpyard.toml"
    path.write_text(gateway_config(primary.url, upstreams[1].url, refresh_ms=REFRESH_MS)
                    + f'\n[ledger]\npath = "{never}"\n' + store_toml(moto.url, state, ledger))
    proc = ServeProcess(path, tmp_path / "workers.log", env=AWS_ENV, args=("--workers", "2"))
    proc.start(60)
    try:
        moto.calls.clear()
        ids = {chat(proc).headers["x-humpyard-request-id"] for _ in range(4)}
        primary.script(status(500))
        assert chat(proc).headers["x-humpyard-target"] == "backup"  # tripped, failed over
        tripped = chat_calls(primary)
        time.sleep(REFRESH_MS / 1000 * 3)  # every worker has re-read the breakers
        for _ in range(8):  # a connection each: the kernel hands them to either worker
            r = chat(proc)
            assert r.headers["x-humpyard-target"] == "backup"
            ids.add(r.headers["x-humpyard-request-id"])
        assert chat_calls(primary) == tripped  # neither worker tried the dead endpoint
        until(lambda: ids <= {d["request_id"] for d in httpx.get(
            proc.url + "/v1/decisions", params={"limit": 100}, timeout=20).json()["decisions"]},
            "every decision listed")
        assert moto.calls.get("BatchWriteItem", 0) > 0
        assert "worker 1 started" in proc.output()
    finally:
        proc.stop()
    assert not never.exists()


def test_workers_refuse_to_start_on_a_table_that_does_not_exist(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    path = tmp_path / "humpyard.toml"
    path.write_text('[providers.p]\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n'
                    f'[ledger]\npath = "{tmp_path / "never.db"}"\n'
                    + store_toml(moto.url, "no-such-state", "no-such-ledger"))
    done = subprocess.run(
        [sys.executable, "-m", "humpyard.cli", "serve", "--config", str(path), "--port", "0",
         "--workers", "2"],
        env={**os.environ, **AWS_ENV, "PYTHONPATH": str(ROOT / "shared")}, cwd=ROOT,
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "store.state_table: no table 'no-such-state'" in done.stderr
    assert "worker 0 started" not in done.stderr  # refused before any worker
    assert not (tmp_path / "never.db").exists()


def _serve_once(path: Path) -> subprocess.CompletedProcess[str]:
    """``humpyard serve`` on ``path`` as a child, expected to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "humpyard.cli", "serve", "--config", str(path), "--port", "0"],
        env={**os.environ, **AWS_ENV, "PYTHONPATH": str(ROOT / "shared")}, cwd=ROOT,
        capture_output=True, text=True, timeout=60)


def test_serve_refuses_to_start_on_a_table_that_does_not_exist(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    path = tmp_path / "humpyard.toml"
    path.write_text('[providers.p]\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n'
                    + store_toml(moto.url, "no-such-state", "no-such-ledger"))
    done = _serve_once(path)
    assert done.returncode == 1, done.stderr
    assert "store.state_table: no table 'no-such-state'" in done.stderr
    assert "testing" not in done.stderr  # no credential in the message


def test_serve_refuses_to_start_on_a_ledger_table_that_does_not_exist(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    """Before: ``serve`` started, ``/readyz`` said ready, and every decision was logged
    as not written (ResourceNotFoundException) and lost."""
    state, _ = fresh_tables(moto.url)
    path = tmp_path / "humpyard.toml"
    path.write_text('[providers.p]\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n'
                    + store_toml(moto.url, state, "no-such-ledger"))
    done = _serve_once(path)
    assert done.returncode == 1, done.stderr
    assert "store.ledger_table: no table 'no-such-ledger'" in done.stderr
    assert "(humpyard store create-tables makes both)" in done.stderr
    assert "Traceback" not in done.stderr


def test_create_tables_makes_both_tables_and_check_wants_botocore(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    path = tmp_path / "humpyard.toml"
    path.write_text(store_toml(moto.url, f"s-{suffix}", f"l-{suffix}"))
    env = {**os.environ, **AWS_ENV, "PYTHONPATH": str(ROOT / "shared")}
    for _ in range(2):  # again: the tables exist already, which is fine
        done = subprocess.run([sys.executable, "-m", "humpyard.cli", "store", "create-tables",
                               "--config", str(path)], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    client = boto3.client("dynamodb", endpoint_url=moto.url, region_name="us-east-1")
    ledger = client.describe_table(TableName=f"l-{suffix}")["Table"]
    # decisions are listed from the table's own keys: no index (ADR 0019)
    assert ledger["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"},
                                   {"AttributeName": "sk", "KeyType": "RANGE"}]
    assert not ledger.get("GlobalSecondaryIndexes")
    assert client.describe_table(TableName=f"s-{suffix}")["Table"]["TableStatus"] == "ACTIVE"

    # Without botocore (blocked in the child), check names the field and the extra.
    blocked = ("import sys; sys.modules['botocore'] = None; from humpyard.cli import main; "
               f"sys.exit(main(['check', '--config', {str(path)!r}]))")
    done = subprocess.run([sys.executable, "-c", blocked], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert 'store.backend: "dynamodb" needs botocore: install humpyard[aws]' in done.stderr
