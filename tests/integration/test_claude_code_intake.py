"""What Claude Code (and the SDKs) need from the intake besides the translation.

Over real sockets against the gateway in front of a fake chat upstream: the
``HEAD /`` preflight, ``x-claude-code-agent-id`` for the ``subagent``
selector, the ``[clients]`` settings (billing line, client identifiers), a
request that fails to decode still recorded with its key, session and stream
flag, and ``GET /v1/models/{id}`` for the OpenAI SDK's ``models.retrieve``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway

KEY, OTHER = "sk-cc-key-0123456789", "sk-narrow-key-0123456789"
ENV = {"CC_KEY": KEY, "NARROW_KEY": OTHER}
CHAT = "/v1/chat/completions"
BILLING = "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=cli;"
CLAUDE_BODY: dict[str, Any] = {
    "model": "claude-opus-4-8", "max_tokens": 64000, "stream": False,
    "system": [{"type": "text", "text": BILLING},
               {"type": "text", "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": "hi"}],
    "metadata": {"user_id": json.dumps({"device_id": "d" * 64, "session_id": "s"})},
}


def config(upstream: str, clients: str = "") -> str:
    return f"""
[providers.fake]
base_url = "{upstream}"
[targets.main]
endpoints = [{{ provider = "fake", model = "fake-main" }}]
[targets.small]
endpoints = [{{ provider = "fake", model = "fake-small" }}]
[targets."org/tuned"]
endpoints = [{{ provider = "fake", model = "fake-tuned" }}]
[routes.auto]
targets = ["main"]
[routes.cheap]
targets = ["small"]
[[select]]
name = "subagents"
when = {{ model = "claude-*", subagent = true }}
route = "cheap"
[[select]]
name = "claude-code"
when = {{ model = "claude-*" }}
route = "auto"
[keys.cc]
key_env = "CC_KEY"
[keys.narrow]
key_env = "NARROW_KEY"
allowed_routes = ["cheap"]
{clients}
"""


@pytest.fixture
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream() as u:
        yield u


@pytest.fixture
def gw(up: FakeUpstream) -> Iterator[Running]:
    with running_gateway(config(up.url), env=ENV, admin_key=KEY) as g:
        yield g


def post_messages(gw: Running, body: Any, **headers: str) -> httpx.Response:
    with gw.client(**{"x-api-key": KEY, **headers}) as c:
        return c.post("/v1/messages", json=body)


def sent(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests_to(CHAT)]


# -- HEAD / -------------------------------------------------------------------------


def test_head_root_is_claude_codes_preflight(gw):
    r = httpx.head(gw.url + "/")  # no key: Claude Code sends it before anything else
    assert r.status_code == 200
    g = httpx.get(gw.url + "/")
    assert g.status_code == 200 and g.json() == {"object": "humpyard", "status": "ok"}


# -- subagents -----------------------------------------------------------------------


def test_claude_code_agent_id_marks_a_subagent(gw, up):
    main = post_messages(gw, CLAUDE_BODY)
    sub = post_messages(gw, CLAUDE_BODY, **{"x-claude-code-agent-id": "agent-7f3a"})
    explicit = post_messages(gw, CLAUDE_BODY, **{"x-claude-code-agent-id": "agent-7f3a",
                                                  "x-humpyard-subagent": "false"})
    assert [r.headers["x-humpyard-rule"] for r in (main, sub, explicit)] == \
        ["claude-code", "subagents", "claude-code"]
    assert [b["model"] for b in sent(up)] == ["fake-main", "fake-small", "fake-main"]


def test_explain_reads_the_agent_header_too(gw):
    with gw.client(authorization=f"Bearer {KEY}") as c:
        r = c.post("/v1/route/explain", json={
            "model": "claude-opus-4-8", "headers": {"X-Claude-Code-Agent-Id": "agent-1"}})
    assert r.status_code == 200, r.text
    assert r.json()["selected"]["rule"] == "subagents"


# -- [clients] -----------------------------------------------------------------------


def test_by_default_the_billing_line_and_client_ids_stay_at_the_gateway(gw, up):
    assert post_messages(gw, CLAUDE_BODY).status_code == 200
    with openai.OpenAI(base_url=gw.v1, api_key=KEY, max_retries=0) as client:
        client.responses.create(model="auto", input="hi", user="u-1", safety_identifier="s-1")
    anth, resp = sent(up)
    assert anth["messages"][0] == {"role": "system", "content": "You are Claude Code."}
    assert "user" not in anth and "device_id" not in json.dumps(anth)
    assert "user" not in resp and "safety_identifier" not in resp
    notes = [d["notes"] for d in gw.decisions()]
    assert any("x-anthropic-billing-header line removed from the system prompt" in n
               for n in notes)
    assert any("metadata.user_id not forwarded: client identifiers stay at the gateway" in n
               for n in notes)


def test_clients_settings_keep_the_billing_line_and_forward_ids(up):
    settings = "[clients]\nkeep_billing_header = true\nforward_user = true\n"
    with running_gateway(config(up.url, settings), env=ENV, admin_key=KEY) as gw:
        assert post_messages(gw, CLAUDE_BODY).status_code == 200
        with openai.OpenAI(base_url=gw.v1, api_key=KEY, max_retries=0) as client:
            client.responses.create(model="auto", input="hi", user="u-1",
                                    safety_identifier="s-1")
        assert gw.gw.config.public_view()["clients"] == {"keep_billing_header": True,
                                                          "forward_user": True}
    anth, resp = sent(up)
    assert anth["messages"][0]["content"].startswith(BILLING)
    assert anth["user"] == CLAUDE_BODY["metadata"]["user_id"]
    assert (resp["user"], resp["safety_identifier"]) == ("u-1", "s-1")


def test_an_unknown_clients_key_is_refused_with_a_suggestion(up):
    with pytest.raises(Exception, match=r"clients.*keep_biling_header.*keep_billing_header"):
        with running_gateway(config(up.url, "[clients]\nkeep_biling_header = true\n"),
                             env=ENV):
            pass


# -- a body that fails to decode is still recorded -------------------------------


@pytest.mark.parametrize("path,body,session", [
    ("/v1/messages", {"model": "claude-opus-4-8", "max_tokens": 10, "stream": True,
                      "messages": [{"role": "user", "content": [{"type": "bogus"}]}]},
     {"x-claude-code-session-id": "cc-sess-1"}),
    ("/v1/responses", {"model": "auto", "input": "hi", "stream": True, "store": True},
     {"session-id": "codex-sess-1"}),
    ("/v1/chat/completions", {"model": "auto", "stream": True, "messages": []},
     {"x-session-id": "chat-sess-1"}),
], ids=["messages", "responses", "chat"])
def test_a_request_that_fails_to_decode_is_recorded_with_key_session_and_stream(
        gw, up, path, body, session):
    with gw.client(authorization=f"Bearer {KEY}", **session) as c:
        r = c.post(path, json=body)
    assert r.status_code == 400
    [d] = gw.decisions()
    assert (d["key_id"], d["session_id"], d["stream"], d["status"]) == \
        ("cc", next(iter(session.values())), True, 400)
    assert d["protocol"] == {"/v1/messages": "anthropic", "/v1/responses": "responses",
                             "/v1/chat/completions": "openai"}[path]
    assert d["model"] == body["model"]
    assert not sent(up)


def test_a_body_that_is_not_json_is_recorded_with_its_key_and_session(gw):
    with gw.client(**{"x-api-key": KEY, "x-claude-code-session-id": "cc-sess-2"}) as c:
        r = c.post("/v1/messages", content=b"{not json")
    assert r.status_code == 400 and r.json()["type"] == "error"
    [d] = gw.decisions()
    assert (d["key_id"], d["session_id"], d["stream"]) == ("cc", "cc-sess-2", False)


# -- GET /v1/models/{id} ----------------------------------------------------------------


def test_models_retrieve_with_the_openai_sdk(gw):
    with openai.OpenAI(base_url=gw.v1, api_key=KEY, max_retries=0) as client:
        route = client.models.retrieve("auto")
        target = client.models.retrieve("org/tuned")
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve("claude-opus-4-8")
        listed = {m.id for m in client.models.list()}
    assert (route.id, route.object, route.owned_by) == ("auto", "model", "humpyard")
    assert target.id == "org/tuned"
    assert missing.value.body["code"] == "unknown_model"
    assert {"auto", "cheap", "main", "small", "org/tuned"} == listed


def test_models_retrieve_hides_routes_the_key_may_not_use(gw):
    with openai.OpenAI(base_url=gw.v1, api_key=OTHER, max_retries=0) as client:
        assert client.models.retrieve("cheap").id == "cheap"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("auto")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=gw.v1, api_key="sk-wrong", max_retries=0
                          ).models.retrieve("cheap")


def test_models_retrieve_with_the_anthropic_sdk_finds_the_route(gw):
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        r = client.models.with_raw_response.retrieve("auto")
    assert r.http_response.status_code == 200
    assert r.http_response.json()["id"] == "auto"
