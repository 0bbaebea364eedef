"""Runtime overrides end to end: create, effect, expiry, delete, fail closed, access."""

from __future__ import annotations

import time

import httpx
import pytest

from humpyard.clock import FakeClock
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

MSG = [{"role": "user", "content": "hi"}]
ENV = {"OPS": "ops-secret", "DEV": "dev-secret"}


def cfg(a: str, b: str, keys: bool = True) -> str:
    text = f"""
[providers.pa]
base_url = "{a}"
[providers.pb]
base_url = "{b}"
[targets.first]
endpoints = [{{ provider = "pa", model = "m1" }}]
[targets.second]
endpoints = [{{ provider = "pb", model = "m2" }}]
[targets.both]
endpoints = [{{ provider = "pa", model = "m3" }}, {{ provider = "pb", model = "m3" }}]
[routes.r]
targets = ["first", "second"]
[routes.solo]
targets = ["first"]
[overrides]
default_secs = 600
max_secs = 3600
"""
    if keys:
        text += """
[keys.ops]
key_env = "OPS"
manage_overrides = true
admin = true
[keys.dev]
key_env = "DEV"
"""
    return text


@pytest.fixture
def ups():
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def chat(gw, model: str = "r", key: str = "dev-secret") -> httpx.Response:
    with gw.client(authorization=f"Bearer {key}") as c:
        return c.post("/v1/chat/completions", json={"model": model, "messages": MSG})


def create(gw, body: dict, key: str = "ops-secret") -> httpx.Response:
    with gw.client(authorization=f"Bearer {key}") as c:
        return c.post("/v1/overrides", json=body)


def test_disable_target_moves_traffic_and_expires(ups):
    a, b = ups
    clock = FakeClock()
    with running_gateway(cfg(a.url, b.url), env=ENV, clock=clock,
                         admin_key="ops-secret") as gw:
        assert chat(gw).headers["x-humpyard-target"] == "first"
        r = create(gw, {"kind": "disable_target", "subject": "first", "reason": "bad answers",
                        "expires_in_secs": 120})
        assert r.status_code == 201, r.text
        ov = r.json()
        assert ov["id"] and ov["kind"] == "disable_target" and ov["created_by"] == "ops"
        assert ov["expires_at"] - ov["created_at"] == 120
        r = chat(gw)
        assert r.headers["x-humpyard-target"] == "second"
        [d] = [x for x in gw.decisions() if x["request_id"] == r.headers["x-humpyard-request-id"]]
        assert d["overrides"] == [{"id": ov["id"], "kind": "disable_target", "subject": "first",
                                   "target": "first", "reason": d["overrides"][0]["reason"]}]
        with gw.client(authorization="Bearer ops-secret") as c:
            cfgv = c.get("/v1/config").json()
            assert cfgv["targets"]["first"]["overridden_by"][0]["override_id"] == ov["id"]
            metrics = c.get("/metrics").text
            assert 'humpyard_overrides_active{kind="disable_target"} 1' in metrics
        clock.advance(121)
        assert chat(gw).headers["x-humpyard-target"] == "first"
        with gw.client(authorization="Bearer ops-secret") as c:
            assert c.get("/v1/overrides").json()["overrides"] == []
            actions = [e["action"] for e in c.get("/v1/overrides/audit").json()["audit"]]
            assert sorted(actions) == ["create", "expire"]


def test_delete_restores_service_and_is_audited(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV, admin_key="ops-secret") as gw:
        ov = create(gw, {"kind": "disable_target", "subject": "first"}).json()
        assert ov["expires_in_secs"] == 600  # [overrides] default_secs
        assert chat(gw).headers["x-humpyard-target"] == "second"
        with gw.client(authorization="Bearer ops-secret") as c:
            assert c.delete(f"/v1/overrides/{ov['id']}").status_code == 200
            assert c.delete(f"/v1/overrides/{ov['id']}").status_code == 404
            audit = c.get("/v1/overrides/audit").json()["audit"]
        assert chat(gw).headers["x-humpyard-target"] == "first"
        assert {(e["action"], e["by"]) for e in audit} == {("create", "ops"), ("remove", "ops")}


def test_fail_closed_when_overrides_remove_every_target(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV) as gw:
        create(gw, {"kind": "disable_target", "subject": "first"})
        r = chat(gw, "solo")
        assert r.status_code == 503
        err = r.json()["error"]
        assert err["code"] == "override_no_target" and "override" in err["message"]
    assert a.requests == []


def test_drain_provider_keeps_other_endpoints(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV) as gw:
        create(gw, {"kind": "drain_provider", "subject": "pa"})
        r = chat(gw, "both")
        assert r.status_code == 200 and r.headers["x-humpyard-provider"] == "pb"
        assert chat(gw, "solo").status_code == 503
    assert a.requests == []


def test_pin_route_cuts_route_to_target(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV) as gw:
        r = create(gw, {"kind": "pin_route", "subject": "r", "target": "second"})
        assert r.status_code == 201
        assert chat(gw).headers["x-humpyard-target"] == "second"


def test_expiry_is_capped_at_max_secs(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV) as gw:
        ov = create(gw, {"kind": "disable_target", "subject": "first",
                         "expires_in_secs": 999999}).json()
        assert ov["expires_at"] - ov["created_at"] == 3600


@pytest.mark.parametrize("body,field", [
    ({"kind": "disable_target", "subject": "nope"}, "unknown target"),
    ({"kind": "drain_provider", "subject": "nope"}, "unknown provider"),
    ({"kind": "pin_route", "subject": "nope", "target": "first"}, "unknown route"),
    ({"kind": "pin_route", "subject": "solo", "target": "second"}, "does not list"),
    ({"kind": "explode", "subject": "first"}, "kind"),
    ({"kind": "disable_target", "subject": "first", "expires_in_secs": -1}, "expires_in_secs"),
])
def test_subjects_must_exist(ups, body, field):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV) as gw:
        r = create(gw, body)
        assert r.status_code == 400 and field in r.json()["error"]["message"]


def test_403_without_manage_overrides_and_401_without_key(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV) as gw:
        r = create(gw, {"kind": "disable_target", "subject": "first"}, key="dev-secret")
        assert r.status_code == 403 and "manage_overrides" in r.json()["error"]["message"]
        with gw.client() as c:
            assert c.post("/v1/overrides", json={}).status_code == 401
            assert c.get("/v1/overrides").status_code == 401


def test_409_without_a_ledger(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url, keys=False), ledger=None) as gw:
        with gw.client() as c:
            r = c.post("/v1/overrides", json={"kind": "disable_target", "subject": "first"})
        assert r.status_code == 409 and "[ledger]" in r.json()["error"]["message"]


def test_override_goes_stale_after_reload_removes_subject(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url, keys=False)) as gw:
        ov = create(gw, {"kind": "pin_route", "subject": "r", "target": "first"}).json()
        new_text = cfg(a.url, b.url, keys=False).replace(
            '[routes.r]\ntargets = ["first", "second"]', '[routes.r]\ntargets = ["second"]')
        from tests.support.gateway import config_from
        gw.gw.swap_config(config_from(new_text))
        with gw.client() as c:
            listed = c.get("/v1/overrides").json()["overrides"]
        assert [(o["id"], o["stale"]) for o in listed] == [(ov["id"], True)]
        r = chat(gw)
        assert r.status_code == 200 and r.headers["x-humpyard-target"] == "second"


def test_expiry_is_recorded_when_it_happens_without_anyone_listing(ups):
    """The gateway's background sweep audits an expiry at the expiry, not at the next
    ``GET /v1/overrides``."""
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV, admin_key="ops-secret") as gw:
        ov = create(gw, {"kind": "disable_target", "subject": "first",
                         "expires_in_secs": 0.5}).json()
        deadline = time.monotonic() + 5
        expired: list[dict] = []
        with gw.client(authorization="Bearer ops-secret") as c:
            while not expired and time.monotonic() < deadline:
                audit = c.get("/v1/overrides/audit").json()["audit"]
                expired = [e for e in audit if e["action"] == "expire"]
                if not expired:
                    time.sleep(0.05)
        assert len(expired) == 1, "expiry not recorded within 5 s"
        assert expired[0]["override_id"] == ov["id"] and expired[0]["by"] is None
        assert expired[0]["ts"] == ov["expires_at"]
        assert chat(gw).headers["x-humpyard-target"] == "first"
