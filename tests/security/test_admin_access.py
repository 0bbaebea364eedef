"""Who may use the admin surfaces, and for whom explain answers.

With keys configured, every read and admin surface needs a valid key (401
without one, or with a wrong one); writing overrides needs
``manage_overrides`` (403 otherwise). With no keys the gateway is open, by
design, and so are these surfaces. Explain answers only for the calling key:
its body has no key field, a credential header put in its ``headers`` is
dropped, and the facts it plans with carry the caller's key id.
"""

from __future__ import annotations

import httpx
import pytest

from tests.security.support import bearer, client
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

CI, OPS = "ci-secret-0123456789", "ops-secret-0123456789"
ENV = {"CI": CI, "OPS": OPS}

READS = ["/v1/models", "/v1/models/open", "/v1/health", "/v1/decisions",
         "/v1/stats?group_by=key", "/v1/config", "/metrics", "/v1/overrides",
         "/v1/overrides/audit", "/v1/quota", "/v1/quota/history"]


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


def test_any_valid_key_reads_but_only_manage_overrides_writes(gw) -> None:
    with client(gw.url) as c:
        for key in (CI, OPS):
            for p in READS:
                assert c.get(p, headers=bearer(key)).status_code == 200, (key, p)
        r = c.post("/v1/overrides", json=OVERRIDE, headers=bearer(CI))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert "manage_overrides" in r.json()["error"]["message"]
        created = c.post("/v1/overrides", json=OVERRIDE, headers={"x-api-key": OPS})
        assert created.status_code == 201, created.text
        oid = created.json()["id"]
        assert created.json()["created_by"] == "ops"
        assert c.delete(f"/v1/overrides/{oid}", headers=bearer(CI)).status_code == 403
        assert c.delete(f"/v1/overrides/{oid}", headers=bearer(OPS)).status_code == 200
        audit = c.get("/v1/overrides/audit", headers=bearer(CI)).json()["audit"]
    assert {(a["action"], a["by"]) for a in audit} >= {("create", "ops"), ("remove", "ops")}


def test_an_open_gateway_has_open_admin_surfaces() -> None:
    with FakeUpstream() as up, running_gateway(config(up.url, keys=False)) as gw, \
            client(gw.url) as c:
        for p in READS:
            assert c.get(p).status_code == 200, p
        assert c.post("/v1/overrides", json=OVERRIDE).status_code == 201


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
