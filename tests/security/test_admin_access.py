"""Who may use the admin surfaces, what each key reads, and for whom explain answers.

With keys configured, every read and admin surface needs a valid key (401
without one, or with a wrong one); writing overrides needs
``manage_overrides`` (403 otherwise). Reads are scoped to the key: a key
without ``admin`` sees only its own decisions and stats (another key's
decision is 404, as an unknown id), the health of its routes' targets, and
gets 403 from ``/v1/config``, ``/metrics`` and quota, and from overrides
unless it has ``manage_overrides``; an ``admin`` key reads everything. With
no keys the gateway is open, by design, and so are these surfaces. Explain
answers only for the calling key: its body has no key field, a credential
header put in its ``headers`` is dropped, and the facts it plans with carry
the caller's key id.
"""

from __future__ import annotations

import httpx
import pytest

from tests.security.support import bearer, client
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

CI, OPS, ROOT = "ci-secret-0123456789", "ops-secret-0123456789", "root-secret-0123456789"
ENV = {"CI": CI, "OPS": OPS, "ROOT": ROOT}

READS = ["/v1/models", "/v1/models/open", "/v1/health", "/v1/decisions",
         "/v1/stats?group_by=key", "/v1/config", "/metrics", "/v1/overrides",
         "/v1/overrides/audit", "/v1/quota", "/v1/quota/history"]
OPERATOR_READS = ["/v1/config", "/metrics", "/v1/quota", "/v1/quota/history"]
OVERRIDE_READS = ["/v1/overrides", "/v1/overrides/audit"]


def config(url: str, keys: bool = True) -> str:
    text = f"""
[providers.p]
base_url = "{url}"
[targets.t1]
endpoints = [{{ provider = "p", model = "m1" }}]
[targets.t2]
endpoints = [{{ provider = "p", model = "m2" }}]
[routes.open]
targets = ["t1"]
[routes.closed]
targets = ["t2"]
"""
    if not keys:
        return text
    return text + """
[[select]]
name = "ops-only"
when = { key = "ops" }
route = "closed"

[keys.ci]
key_env = "CI"
allowed_routes = ["open"]
budget = { usd = 5.0 }
[keys.ops]
key_env = "OPS"
manage_overrides = true
[keys.root]
key_env = "ROOT"
admin = true
"""


@pytest.fixture(scope="module")
def gw():
    with FakeUpstream() as up, running_gateway(config(up.url), env=ENV) as running:
        yield running


OVERRIDE = {"kind": "disable_target", "subject": "t2", "reason": "test", "expires_in_secs": 60}

NO_KEY: list[dict[str, str]] = [
    {}, bearer("wrong-" + CI), {"x-api-key": "wrong"}, {"authorization": f"Basic {CI}"},
    {"authorization": "Bearer"}, {"cookie": f"key={OPS}"}, {"proxy-authorization": f"Bearer {OPS}"},
]


@pytest.mark.parametrize("headers", NO_KEY, ids=["none", "wrong-bearer", "wrong-x-api-key",
                                                  "basic", "empty", "cookie", "proxy-auth"])
def test_every_surface_is_401_without_a_valid_key(gw, headers: dict[str, str]) -> None:
    with client(gw.url, **headers) as c:
        answers = {p: c.get(p) for p in READS}
        answers["GET /v1/decisions/{id}"] = c.get("/v1/decisions/req_nope")
        answers["POST /v1/route/explain"] = c.post("/v1/route/explain", json={"model": "open"})
        answers["POST /v1/overrides"] = c.post("/v1/overrides", json=OVERRIDE)
        answers["DELETE /v1/overrides/{id}"] = c.delete("/v1/overrides/ov_nope")
        answers["POST /v1/messages/count_tokens"] = c.post(
            "/v1/messages/count_tokens", json={"model": "open", "messages": []})
        answers["POST /v1/responses"] = c.post("/v1/responses",
                                               json={"model": "open", "input": "hi"})
    assert {p: r.status_code for p, r in answers.items()} == {p: 401 for p in answers}
    for r in answers.values():  # OpenAI's error shape, or Anthropic's on /v1/messages
        assert "authentication_error" in (r.json()["error"]["type"], r.json()["error"].get("code"))


def test_an_admin_key_reads_every_surface(gw) -> None:
    with client(gw.url, **bearer(ROOT)) as c:
        for p in READS:
            assert c.get(p).status_code == 200, p


@pytest.mark.parametrize("key", [CI, OPS], ids=["plain", "manage_overrides"])
def test_a_key_without_admin_is_refused_the_operators_reads(gw, key: str) -> None:
    with client(gw.url, **bearer(key)) as c:
        answers = {p: c.get(p) for p in OPERATOR_READS}
        for p in READS:
            if p not in OPERATOR_READS and p not in OVERRIDE_READS:
                assert c.get(p).status_code == 200, p
    assert {p: r.status_code for p, r in answers.items()} == {p: 403 for p in answers}
    for r in answers.values():
        assert r.json()["error"]["code"] == "forbidden"
        assert "admin = true" in r.json()["error"]["message"]
        assert "base_url" not in r.text and "budget" not in r.text


def test_overrides_are_read_with_manage_overrides_or_admin(gw) -> None:
    with client(gw.url) as c:
        for p in OVERRIDE_READS:
            assert c.get(p, headers=bearer(CI)).status_code == 403, p
            assert c.get(p, headers=bearer(OPS)).status_code == 200, p
            assert c.get(p, headers=bearer(ROOT)).status_code == 200, p


def test_only_manage_overrides_writes(gw) -> None:
    with client(gw.url) as c:
        r = c.post("/v1/overrides", json=OVERRIDE, headers=bearer(CI))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert "manage_overrides" in r.json()["error"]["message"]
        created = c.post("/v1/overrides", json=OVERRIDE, headers={"x-api-key": OPS})
        assert created.status_code == 201, created.text
        oid = created.json()["id"]
        assert created.json()["created_by"] == "ops"
        assert c.delete(f"/v1/overrides/{oid}", headers=bearer(CI)).status_code == 403
        assert c.delete(f"/v1/overrides/{oid}", headers=bearer(OPS)).status_code == 200
        assert c.post("/v1/overrides", json=OVERRIDE, headers=bearer(ROOT)).status_code == 403
        audit = c.get("/v1/overrides/audit", headers=bearer(OPS)).json()["audit"]
    assert {(a["action"], a["by"]) for a in audit} >= {("create", "ops"), ("remove", "ops")}


def test_an_open_gateway_has_open_admin_surfaces() -> None:
    with FakeUpstream() as up, running_gateway(config(up.url, keys=False)) as gw, \
            client(gw.url) as c:
        for p in READS:
            assert c.get(p).status_code == 200, p
        assert c.post("/v1/overrides", json=OVERRIDE).status_code == 201


def chat(url: str, key: str, model: str) -> str:
    with client(url, **bearer(key)) as c:
        r = c.post("/v1/chat/completions",
                   json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    return r.headers["x-humpyard-request-id"]


@pytest.fixture(scope="module")
def traffic(gw) -> dict[str, list[str]]:
    """Requests of each key: ci twice on its route, ops three times on the other."""
    ids = {"ci": [chat(gw.url, CI, "open") for _ in range(2)],
           "ops": [chat(gw.url, OPS, "closed") for _ in range(3)]}
    gw.recorded(5)
    return ids


def test_a_plain_key_lists_only_its_own_decisions(gw, traffic) -> None:
    with client(gw.url, **bearer(CI)) as c:
        mine = c.get("/v1/decisions", params={"limit": 1000}).json()["decisions"]
        asked = c.get("/v1/decisions", params={"key": "ops"}).json()["decisions"]
        by_route = c.get("/v1/decisions", params={"route": "closed"}).json()["decisions"]
    assert {d["key_id"] for d in mine} == {"ci"}
    assert set(traffic["ci"]) <= {d["request_id"] for d in mine}
    assert asked == [] and by_route == []
    with client(gw.url, **bearer(ROOT)) as c:
        every = c.get("/v1/decisions", params={"limit": 1000}).json()["decisions"]
        ops = c.get("/v1/decisions", params={"key": "ops"}).json()["decisions"]
    assert {"ci", "ops"} <= {d["key_id"] for d in every}
    assert {d["request_id"] for d in ops} >= set(traffic["ops"])


def test_another_keys_decision_is_not_found_to_a_plain_key(gw, traffic) -> None:
    other = traffic["ops"][0]
    with client(gw.url, **bearer(CI)) as c:
        theirs = c.get(f"/v1/decisions/{other}")
        unknown = c.get("/v1/decisions/req_does_not_exist")
        mine = c.get(f"/v1/decisions/{traffic['ci'][0]}")
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == unknown.json()  # nothing tells an id that exists apart
    assert mine.status_code == 200 and mine.json()["key_id"] == "ci"
    with client(gw.url, **bearer(ROOT)) as c:
        assert c.get(f"/v1/decisions/{other}").json()["key_id"] == "ops"


@pytest.mark.parametrize("group_by", ["key", "route", "target", "provider"])
def test_a_plain_key_sees_only_its_own_stats(gw, traffic, group_by: str) -> None:
    with client(gw.url, **bearer(CI)) as c:
        mine = c.get("/v1/stats", params={"group_by": group_by}).json()
        asked = c.get("/v1/stats", params={"group_by": group_by, "key": "ops"}).json()
    want = {"key": "ci", "route": "open", "target": "t1", "provider": "p"}[group_by]
    assert [(g["key"], g["requests"]) for g in mine["groups"]] == [(want, 2)]
    assert mine["key"] == "ci" and asked["groups"] == []
    with client(gw.url, **bearer(ROOT)) as c:
        every = {g["key"]: g["requests"] for g in
                 c.get("/v1/stats", params={"group_by": group_by}).json()["groups"]}
        ops = c.get("/v1/stats", params={"group_by": group_by, "key": "ops"}).json()
    assert sum(every.values()) >= 5
    want_ops = {"key": "ops", "route": "closed", "target": "t2", "provider": "p"}[group_by]
    assert [(g["key"], g["requests"]) for g in ops["groups"]] == [(want_ops, 3)]


def test_a_plain_key_sees_the_health_of_its_routes_targets_only(gw) -> None:
    with client(gw.url) as c:
        ci = c.get("/v1/health", headers=bearer(CI)).json()
        ops = c.get("/v1/health", headers=bearer(OPS)).json()
    assert [t["target"] for t in ci["targets"]] == ["t1"]
    assert [e["target"] for e in ci["endpoints"]] == ["t1"]
    assert {t["target"] for t in ops["targets"]} == {"t1", "t2"}  # every route allowed


def test_the_metrics_carry_usage_for_an_admin_only(gw, traffic) -> None:
    with client(gw.url) as c:
        assert c.get("/metrics", headers=bearer(CI)).status_code == 403
        text = c.get("/metrics", headers=bearer(ROOT)).text
    assert 'humpyard_tokens_total{key="ops",route="closed",target="t2",kind="input"}' in text
    assert 'humpyard_tokens_total{key="ci",route="open",target="t1",kind="input"}' in text


def explain(gw, key: str, body: dict) -> httpx.Response:
    with client(gw.url, **bearer(key)) as c:
        return c.post("/v1/route/explain", json=body)


def test_explain_answers_for_the_calling_key_only(gw) -> None:
    as_ci = explain(gw, CI, {"model": "open"}).json()
    as_ops = explain(gw, OPS, {"model": "open"}).json()
    assert as_ci["selected"]["rule"] == "default"
    assert as_ci["rules"][0]["mismatches"] == ["key: 'ops' != 'ci'"]
    assert as_ci["budget"]["usd"] == 5.0  # ci's budget, not anybody else's
    assert as_ops["selected"] == {"route": "closed", "rule": "ops-only", "source": "selector"}
    assert as_ops["budget"] is None


@pytest.mark.parametrize("field", ["key", "key_id", "api_key", "as_key"])
def test_explain_has_no_field_to_name_another_key(gw, field: str) -> None:
    r = explain(gw, CI, {"model": "open", field: "ops"})
    assert r.status_code == 400
    assert "unknown fields" in r.json()["error"]["message"]


def test_credential_headers_in_an_explain_body_are_ignored(gw) -> None:
    headers = {"Authorization": f"Bearer {OPS}", "x-api-key": OPS, "cookie": OPS,
               "proxy-authorization": OPS}
    answer = explain(gw, CI, {"model": "open", "headers": headers}).json()
    assert answer["selected"]["rule"] == "default"
    assert answer["rules"][0]["mismatches"] == ["key: 'ops' != 'ci'"]
    assert OPS not in str(answer)
