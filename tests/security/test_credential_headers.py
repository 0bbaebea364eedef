"""Credential headers: never matched by a selector, never forwarded; nor is any client
header, but for an Anthropic client's version and betas to an Anthropic upstream.

``authorization``, ``x-api-key``, ``cookie`` and ``proxy-authorization`` are
refused by the configuration as selector conditions and dropped from the
request facts, so no rule (on any header name) can see them. Upstream, the
gateway sends its own fixed headers, the provider's static headers and the
provider's own key, and nothing the client sent: these tests pin the exact
set of header names an upstream receives.
"""

from __future__ import annotations

import pytest

import humpyard
from humpyard.config import load_config_text
from humpyard.errors import ConfigError
from humpyard.flow import facts_for
from humpyard.records import Call
from tests.security.support import PROVIDER_KEY, bearer, chat, client
from tests.support.anthropic_steps import message
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

CLIENT_KEY = "hk-client-HEADERS-6d4b2f0e8c6a4e2c0a8e"

# What an upstream may see: httpx's own four, the gateway's three, the provider's.
GATEWAY_HEADERS = {"host", "user-agent", "content-type", "accept", "accept-encoding",
                   "content-length"}
STATIC = {"x-title": "humpyard-tests"}

CLIENT_HEADERS = {
    "x-api-key": CLIENT_KEY, "cookie": f"session={CLIENT_KEY}",
    "proxy-authorization": f"Basic {CLIENT_KEY}", "user-agent": "client-agent/9.9",
    "x-humpyard-profile": "deep", "x-humpyard-tag-team": "infra",
    "x-switchyard-session-id": "sess-123", "x-session-id": "sess-456",
    "x-forwarded-for": "203.0.113.9", "x-request-id": "client-rid-1",
    "openai-organization": "org-client", "anthropic-version": "2023-06-01",
    "anthropic-beta": "tools-2024", "x-stainless-lang": "client-lang-marker",
    "x-client": "openclaw", "x-custom-header": "custom-value",
    "accept-language": "client-language-marker",
}


def config(url: str, *, with_key: bool = True) -> str:
    key = 'api_key_env = "PK"' if with_key else ""
    return f"""
[providers.p]
base_url = "{url}"
{key}
headers = {{ "X-Title" = "humpyard-tests" }}
[targets.t1]
endpoints = [{{ provider = "p", model = "m1" }}]
[targets.t2]
endpoints = [{{ provider = "p", model = "m2" }}]
[routes.auto]
targets = ["t1", "t2"]
[routes.staged]
type = "stage_router"
efficient = ["t1"]
capable = ["t2"]

[[select]]
when = {{ model = "auto", header = {{ "x-client" = "openclaw" }} }}
route = "t2"

[keys.c]
key_env = "CK"
"""


ENV = {"PK": PROVIDER_KEY, "CK": CLIENT_KEY}


@pytest.mark.parametrize("name", ["authorization", "Authorization", "x-api-key", "X-Api-Key",
                                  "cookie", "COOKIE", "proxy-authorization",
                                  "Proxy-Authorization"])
def test_a_selector_on_a_credential_header_is_refused(name: str) -> None:
    rule = f'[[select]]\nwhen = {{ header = {{ "{name}" = "*" }} }}\nroute = "t1"\n'
    with pytest.raises(ConfigError) as info:
        load_config_text(config("http://127.0.0.1:9/v1") + rule, env=ENV)
    assert f"credential header {name!r} cannot be matched" in str(info.value)


def test_request_facts_never_hold_a_credential_header() -> None:
    cfg = load_config_text(config("http://127.0.0.1:9/v1"), env=ENV)
    headers = {"authorization": f"Bearer {CLIENT_KEY}", **CLIENT_HEADERS}
    facts = facts_for(Call(request_id="r", config=cfg, key=cfg.keys["c"], headers=headers,
                           body=chat("auto")))
    assert not {"authorization", "x-api-key", "cookie", "proxy-authorization"} & set(facts.headers)
    assert CLIENT_KEY not in repr(facts)
    assert facts.headers["x-client"] == "openclaw" and facts.key_id == "c"


def _send_everything(url: str, key: str | None) -> list[int]:
    auth = bearer(key) if key else {}
    anthropic = {"model": "auto", "max_tokens": 8, "messages": [{"role": "user",
                                                                  "content": "hi"}]}
    with client(url, **CLIENT_HEADERS, **auth) as c:
        return [c.post("/v1/chat/completions", json=chat("auto")).status_code,
                c.post("/v1/chat/completions", json=chat("auto", stream=True)).status_code,
                c.post("/v1/chat/completions", json=chat("staged")).status_code,
                c.post("/v1/messages", json=anthropic).status_code,
                c.post("/v1/messages", json={**anthropic, "stream": True}).status_code,
                c.post("/v1/responses", json={"model": "auto", "input": "hi"}).status_code,
                c.post("/v1/responses", json={"model": "auto", "input": "hi",
                                              "stream": True}).status_code]


def test_upstream_gets_the_providers_key_and_no_client_header() -> None:
    with FakeUpstream() as up:
        with running_gateway(config(up.url), env=ENV) as gw:
            assert _send_everything(gw.url, CLIENT_KEY) == [200] * 7
        calls = [r for r in up.requests if r.path == "/v1/chat/completions"]
    assert len(calls) >= 7
    for r in calls:
        assert set(r.headers) == GATEWAY_HEADERS | {"authorization"} | set(STATIC), r.headers
        assert r.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
        assert r.headers["x-title"] == STATIC["x-title"]
        assert r.headers["user-agent"] == f"humpyard/{humpyard.__version__}"
        seen = " ".join(r.headers.values()) + repr(r.json)
        for value in (CLIENT_KEY, *CLIENT_HEADERS.values()):
            assert value not in seen, (value, r.headers)


def test_without_a_provider_key_no_authorization_goes_upstream_at_all() -> None:
    with FakeUpstream() as up:
        with running_gateway(config(up.url, with_key=False), env=ENV) as gw:
            assert _send_everything(gw.url, CLIENT_KEY) == [200] * 7
        calls = [r for r in up.requests if r.path == "/v1/chat/completions"]
    for r in calls:
        assert set(r.headers) == GATEWAY_HEADERS | set(STATIC), r.headers


FORWARDED = {"anthropic-version", "anthropic-beta"}  # to an Anthropic upstream, from its kind


def test_an_anthropic_upstream_gets_its_key_as_x_api_key_and_only_the_version_headers() -> None:
    text = config("URL").replace('headers = {', 'protocol = "anthropic"\nheaders = {')
    with FakeUpstream(default=message()) as up:
        with running_gateway(text.replace("URL", up.url), env=ENV) as gw:
            assert _send_everything(gw.url, CLIENT_KEY) == [200] * 7
        calls = [r for r in up.requests if r.path == "/v1/messages"]
    assert len(calls) >= 7
    passed = calls[3:5]  # the two from /v1/messages (see _send_everything's order)
    translated = calls[:3] + calls[5:]
    for r in calls:
        assert r.headers["x-api-key"] == PROVIDER_KEY and "authorization" not in r.headers
        seen = " ".join(v for k, v in r.headers.items() if k not in FORWARDED) + repr(r.json)
        for value in (CLIENT_KEY, *CLIENT_HEADERS.values()):
            assert value not in seen, (value, r.headers)
    for r in translated:
        assert set(r.headers) == GATEWAY_HEADERS | {"x-api-key", "anthropic-version"} | set(
            STATIC), r.headers
    for r in passed:  # the client's version and betas, nothing else of the client's
        assert set(r.headers) == GATEWAY_HEADERS | {"x-api-key"} | FORWARDED | set(STATIC)
        assert r.headers["anthropic-beta"] == CLIENT_HEADERS["anthropic-beta"]


@pytest.mark.parametrize(("headers", "why"), [
    ('{ "x bad" = "v" }', "'x bad' is not an HTTP header name"),
    ('{ "x-title" = "line\\r\\nx-injected: 1" }', "the value of header 'x-title' has characters"),
    ('{ "x-title" = "caf\\u00e9" }', "the value of header 'x-title' has characters"),
])
def test_a_static_header_that_http_cannot_carry_is_refused_without_quoting_it(
        headers: str, why: str) -> None:
    static = 'headers = { "X-Title" = "humpyard-tests" }'
    text = config("http://127.0.0.1:9/v1").replace(static, f"headers = {headers}")
    assert static not in text
    with pytest.raises(ConfigError) as info:
        load_config_text(text, env=ENV)
    assert why in str(info.value)
    assert "injected" not in str(info.value) and "caf" not in str(info.value)
