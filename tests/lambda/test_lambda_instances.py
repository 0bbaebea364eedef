"""Two Lambda instances in two processes sharing one DynamoDB (a moto server).

Each ``Driver`` is a child process that imports the real
``functions/gateway/app.py`` (and ``admin``) as its own instance and is
invoked with API Gateway events; both talk to the same moto server and the
same ``FakeUpstream`` servers on loopback. What one instance learns (a
tripped breaker, an override, a decision) the other must honour within one
``state_refresh_ms``, without paying for it with a failed upstream call.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from lambda_support import Driver, event, gateway_config, item_bytes

from humpyard.store.dynamodb import create_tables
from tests.support import FakeUpstream, delay, ok, status

REFRESH_MS = 200
REFRESH = REFRESH_MS / 1000


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as primary, FakeUpstream() as backup:
        backup.default = ok("from backup")
        yield primary, backup


Instances = Callable[..., list[Driver]]


@pytest.fixture
def instances(moto_url: str, tmp_path: Path, upstreams: tuple[FakeUpstream, FakeUpstream]
              ) -> Iterator[Instances]:
    """``instances(n=2, **config)``: n warm instances of one stack (fresh tables)."""
    drivers: list[Driver] = []
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def start(n: int = 2, **config: Any) -> list[Driver]:
        suffix = uuid.uuid4().hex[:8]
        state, ledger = f"state-{suffix}", f"ledger-{suffix}"
        create_tables(dynamodb, state, ledger)
        primary, backup = upstreams
        path = tmp_path / "humpyard.toml"
        path.write_text(gateway_config(primary.url, backup.url, **config))
        env = {"AWS_ENDPOINT_URL_DYNAMODB": moto_url, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_REGION": "us-east-1", "HUMPYARD_STATE_TABLE": state,
               "HUMPYARD_LEDGER_TABLE": ledger, "HUMPYARD_CONFIG": str(path)}
        made = [Driver(env, tmp_path / f"instance-{suffix}-{i}.log") for i in range(n)]
        drivers.extend(made)
        for d in made:  # cold starts, in parallel
            d.send("gateway", event("chat_post"))
        for d in made:
            answer = d.receive()["response"]
            assert answer["statusCode"] == 200, answer["body"]
            assert target(answer) == "primary"
        return made

    try:
        yield start
    finally:
        for d in drivers:
            d.quit()
        for d in drivers:
            d.close()


def chat(driver: Driver) -> dict[str, Any]:
    response: dict[str, Any] = driver.invoke("gateway", event("chat_post"))["response"]
    assert response["statusCode"] == 200, response["body"]
    return response


def chat_calls(up: FakeUpstream) -> int:
    return len(up.requests_to("/v1/chat/completions"))


def target(response: dict[str, Any]) -> str:
    return response["headers"]["x-humpyard-target"]  # type: ignore[no-any-return]


def provider(response: dict[str, Any]) -> str:
    return response["headers"]["x-humpyard-provider"]  # type: ignore[no-any-return]


def test_a_breaker_tripped_by_one_instance_is_honoured_by_the_other(
        instances: Instances, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    primary, _ = upstreams
    a, b = instances(refresh_ms=REFRESH_MS, cooldown_secs=60)  # both warm, served by primary

    primary.script(status(500))
    assert target(chat(a)) == "backup"  # a met the failure, tripped, failed over
    failed = chat_calls(primary)

    time.sleep(REFRESH * 1.5)  # one refresh of b's snapshot
    assert target(chat(b)) == "backup"
    assert chat_calls(primary) == failed  # b never tried the broken endpoint

    health = b.invoke("admin", event("health_get", headers={"x-api-key": ""}))["response"]
    states = {e["target"]: e["state"] for e in json.loads(health["body"])["endpoints"]}
    assert states == {"primary": "cooling_down", "backup": "healthy"}


def test_an_override_created_through_one_removes_the_target_in_the_other(
        instances: Instances, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    primary, _ = upstreams
    a, b = instances(refresh_ms=REFRESH_MS)

    created = a.invoke("admin", event("overrides_post"))["response"]
    assert created["statusCode"] == 201, created["body"]
    before = chat_calls(primary)

    time.sleep(REFRESH * 1.5)
    assert target(chat(b)) == "backup"
    assert chat_calls(primary) == before


def test_a_decision_written_by_one_is_listed_by_the_other(instances: Instances) -> None:
    a, b = instances(refresh_ms=REFRESH_MS)
    rid = chat(a)["headers"]["x-humpyard-request-id"]

    listed = b.invoke("admin", event("health_get", path="/v1/decisions", method="GET",
                                     query={"route": "auto"}))["response"]
    assert listed["statusCode"] == 200, listed["body"]
    decisions = json.loads(listed["body"])["decisions"]
    assert rid in [d["request_id"] for d in decisions]  # with the two warm-up requests
    assert len(decisions) == 3
    one = b.invoke("admin", event("health_get", path=f"/v1/decisions/{rid}",
                                  method="GET"))["response"]
    assert json.loads(one["body"])["target"] == "primary"


def test_concurrent_requests_after_a_cooldown_send_exactly_one_probe(
        instances: Instances, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    """The probe lease is a conditional write: of two instances asking at once, one wins.

    ``primary`` has a spare endpoint, so the loser has somewhere else to go (the
    executor admits a half-open endpoint anyway when it is its target's last).
    """
    primary, _ = upstreams
    cooldown = 1.0
    a, b = instances(refresh_ms=REFRESH_MS, cooldown_secs=cooldown, spare_endpoint=True)
    primary.script(status(500))
    assert provider(chat(a)) == "up2"  # tripped up1, failed over to the spare endpoint
    tripped = chat_calls(primary)

    time.sleep(cooldown + REFRESH)
    primary.script(delay(1.5, ok("probe answered")))  # the probe is still out when the other asks
    a.send("gateway", event("chat_post"))
    b.send("gateway", event("chat_post"))
    answers = [a.receive()["response"], b.receive()["response"]]

    assert chat_calls(primary) == tripped + 1  # one probe between the two instances
    assert sorted(provider(r) for r in answers) == ["up1", "up2"]
    assert all(r["statusCode"] == 200 and target(r) == "primary" for r in answers)


def test_dynamodb_calls_per_warm_request(
        instances: Instances, moto_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The price tag of a request, printed for docs/deploy.md (run with -s to see it)."""
    (a,) = instances(1, refresh_ms=60_000)
    warm = [a.invoke("gateway", event("chat_post"))["dynamodb"] for _ in range(10)]

    (a_refresh,) = instances(1, refresh_ms=REFRESH_MS)
    refreshed = []
    for _ in range(3):
        time.sleep(REFRESH * 1.2)
        refreshed.append(a_refresh.invoke("gateway", event("chat_post"))["dynamodb"])

    # The decision is one conditional put; nothing is read while the snapshot is fresh, and
    # at most one read (the whole shared state) when it is due. Stats and latency wait in
    # the instance (a minute, half a minute) and are not in these ten requests.
    for calls in warm:
        assert calls == {"PutItem": 1}, calls
    reads = {"Query", "GetItem", "BatchGetItem", "Scan"}
    for calls in refreshed:
        assert calls.get("PutItem") == 1, calls
        assert sum(n for op, n in calls.items() if op in reads) <= 1, calls
        assert "TransactWriteItems" not in calls

    units = _write_units(moto_url)
    # one item, no index entry (ADR 0019): one write unit
    assert units["decision_bytes"] <= 1024 and units["gsi_entries"] == 0
    assert units["write_units"] == 1
    with capsys.disabled():
        print("\nDynamoDB calls per warm chat request (snapshot fresh):",
              [dict(c) for c in warm[:3]])
        print("DynamoDB calls per warm chat request (refresh due):", refreshed)
        print("Write units of one decision:", units)


def _write_units(moto_url: str) -> dict[str, Any]:
    """Sizes of what one decision writes, priced as DynamoDB bills them (1 KB units; each
    GSI entry of the previous layout, if any were still written, one more)."""
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")
    tables = dynamodb.list_tables()["TableNames"]
    ledger = next(t for t in tables if t.startswith("ledger-"))
    decision = next(i for i in dynamodb.scan(TableName=ledger)["Items"]
                    if i["pk"]["S"].startswith("decision#"))
    gsis = sum(1 for attr in ("g_all", "g_rule", "g_outcome", "g_route", "g_key")
               if attr in decision)
    return {"decision_bytes": item_bytes(decision), "gsi_entries": gsis,
            "write_units": math.ceil(item_bytes(decision) / 1024) + gsis}
