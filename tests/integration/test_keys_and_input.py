"""Keys (401/403, constant-time matching) and malformed input (400/413), end to end."""

from __future__ import annotations

import hashlib

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

MSG = [{"role": "user", "content": "hi"}]


def config(url: str, extra: str = "") -> str:
    ops_digest = hashlib.sha256(b"ops-secret").hexdigest()
    return f"""
max_body_bytes = 4096
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
[keys.ci]
key_env = "CI_KEY"
allowed_routes = ["open"]
[keys.ops]
key_sha256 = "{ops_digest}"
manage_overrides = true
admin = true
{extra}
"""


ENV = {"CI_KEY": "ci-secret"}


@pytest.fixture
def up():
    with FakeUpstream() as u:
        yield u


def post(url: str, body: object, **headers: str) -> httpx.Response:
    with httpx.Client(timeout=10) as c:
        if isinstance(body, bytes | str):
            return c.post(url + "/v1/chat/completions", content=body,
                          headers={"content-type": "application/json", **headers})
        return c.post(url + "/v1/chat/completions", json=body, headers=headers)


def test_missing_and_wrong_keys_are_401(up):
    with running_gateway(config(up.url), env=ENV) as gw:
        r = post(gw.url, {"model": "open", "messages": MSG})
        assert r.status_code == 401
        assert "missing API key" in r.json()["error"]["message"]
        r = post(gw.url, {"model": "open", "messages": MSG}, authorization="Bearer nope")
        assert r.status_code == 401
        assert "nope" not in r.text
    assert up.requests == []


def test_bearer_and_x_api_key_both_work(up):
    with running_gateway(config(up.url), env=ENV) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="ci-secret")
        assert client.chat.completions.create(model="open", messages=MSG).choices
        r = post(gw.url, {"model": "open", "messages": MSG}, **{"x-api-key": "ops-secret"})
        assert r.status_code == 200


def test_route_not_allowed_is_403(up):
    with running_gateway(config(up.url), env=ENV) as gw:
        r = post(gw.url, {"model": "closed", "messages": MSG},
                 authorization="Bearer ci-secret")
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden"
        assert "closed" in r.json()["error"]["message"]
        # a bare target the key does not list is refused too
        r = post(gw.url, {"model": "t2", "messages": MSG}, authorization="Bearer ci-secret")
        assert r.status_code == 403
    assert up.requests == []


def test_models_lists_only_what_the_key_may_use(up):
    with running_gateway(config(up.url), env=ENV) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="ci-secret")
        assert [m.id for m in client.models.list()] == ["open"]
        client = openai.OpenAI(base_url=gw.v1, api_key="ops-secret")
        assert {m.id for m in client.models.list()} == {"open", "closed", "t1", "t2"}


def test_open_gateway_needs_no_key(up):
    text = f"""
[providers.p]
base_url = "{up.url}"
[targets.t1]
endpoints = [{{ provider = "p", model = "m1" }}]
"""
    with running_gateway(text) as gw:
        assert post(gw.url, {"model": "t1", "messages": MSG}).status_code == 200


def test_unknown_model_is_404(up):
    with running_gateway(config(up.url), env=ENV) as gw:
        r = post(gw.url, {"model": "nope", "messages": MSG}, authorization="Bearer ops-secret")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "unknown_model"


@pytest.mark.parametrize("body,field", [
    (b"{not json", "not valid JSON"),
    (b"", "empty"),
    (b"[1,2]", "JSON object"),
    ({"messages": MSG}, "model"),
    ({"model": "open"}, "messages"),
    ({"model": "open", "messages": "hi"}, "messages"),
    ({"model": 5, "messages": MSG}, "model"),
    ({"model": "open", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "open", "messages": MSG, "stream": "yes"}, "stream"),
    ({"model": "open", "messages": MSG, "stream": True,
      "stream_options": [{"a": 1, "b": 2, "c": 3}]}, "stream_options"),
    ({"model": "open", "messages": MSG, "stream_options": "usage"}, "stream_options"),
    ({"model": "open", "messages": MSG, "max_tokens": 10**12}, "max_tokens"),
    (b'{"model":"open","messages":[{"role":"user","content":"\xff"}]}', "UTF-8"),
])
def test_malformed_bodies_are_400_naming_the_problem(up, body, field):
    with running_gateway(config(up.url), env=ENV, admin_key="ops-secret") as gw:
        r = post(gw.url, body, authorization="Bearer ops-secret")
        assert r.status_code == 400, r.text
        assert field in r.json()["error"]["message"]
        [d] = gw.decisions()
        assert d["status"] == 400
    assert up.requests == []


def test_body_over_limit_is_413(up):
    with running_gateway(config(up.url), env=ENV) as gw:
        big = {"model": "open", "messages": [{"role": "user", "content": "x" * 5000}]}
        r = post(gw.url, big, authorization="Bearer ops-secret")
        assert r.status_code == 413
        assert "limit" in r.json()["error"]["message"]
    assert up.requests == []


def test_deep_json_is_refused(up):
    deep = "[" * 200 + "]" * 200
    body = '{"model":"open","messages":' + deep + "}"
    with running_gateway(config(up.url), env=ENV) as gw:
        r = post(gw.url, body, authorization="Bearer ops-secret")
        assert r.status_code == 400 and "nests deeper" in r.json()["error"]["message"]
