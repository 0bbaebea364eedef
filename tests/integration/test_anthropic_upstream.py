"""Anthropic-native upstreams, end to end over real sockets.

The gateway runs on loopback in front of a fake Anthropic Messages upstream
(``tests/support/anthropic_steps.py``) and a fake OpenAI-compatible one; the
official ``anthropic`` and ``openai`` SDKs are the clients. Each test checks
what the SDK parsed and what the upstream received on the wire.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.anthropic_steps import (
    COUNT,
    MESSAGES,
    bodies,
    count,
    error,
    event,
    message,
    stream_error,
    thinking,
    tool_use,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Exchange, Step, ok, status, tool_call

KEY = "sk-ant-upstream-secret"
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
OPENAI_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": WEATHER["input_schema"]}}
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg=="


PRICE = "{ input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 }"


def config(claude: str, oa: str, *, extra: str = "", claude_headers: str = "",
           endpoint: str = "", route: str = "") -> str:
    return f"""
[providers.claude]
base_url = "{claude}"
protocol = "anthropic"
api_key_env = "ANTH_KEY"
{claude_headers}
[providers.oa]
base_url = "{oa}"
api_key_env = "OA_KEY"
[targets.sonnet]
endpoints = [{{ provider = "claude", model = "claude-sonnet-4-5", price = {PRICE} {endpoint} }}]
[targets.backup]
endpoints = [{{ provider = "oa", model = "ma" }}]
[routes.r]
targets = ["sonnet", "backup"]
{route}
[health]
failure_threshold = 0
{extra}
"""


ENV = {"ANTH_KEY": KEY, "OA_KEY": "sk-openai-upstream"}


@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream(default=message()) as claude, FakeUpstream() as oa:
        yield claude, oa


@contextmanager
def gateway_for(ups: tuple[FakeUpstream, FakeUpstream], **kw: Any) -> Iterator[Running]:
    claude, oa = ups
    with running_gateway(config(claude.url, oa.url, **kw), env=ENV) as g:
        yield g


@pytest.fixture
def gw(ups: tuple[FakeUpstream, FakeUpstream]) -> Iterator[Running]:
    with gateway_for(ups) as g:
        yield g


@contextmanager
def claude_sdk(gw: Running, **kw: Any) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gw.url, api_key="client-key", max_retries=0,
                             timeout=30, **kw) as client:
        yield client


@contextmanager
def openai_sdk(gw: Running) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0,
                       timeout=30) as client:
        yield client


def decisions(gw: Running, count: int = 1) -> list[dict[str, Any]]:
    """The newest ``count`` decisions, oldest first, waiting (with a deadline) for a
    stream's record, which closes as the stream ends."""
    deadline = time.monotonic() + 10
    while True:
        found = gw.decisions()
        if len(found) >= count or time.monotonic() > deadline:
            return list(reversed(found[:count]))
        time.sleep(0.02)


def sent_body(raw: Any) -> dict[str, Any]:
    """What the SDK put on the wire."""
    return json.loads(raw.http_request.content)  # type: ignore[no-any-return]


# -- a /v1/messages client's body passes through ---------------------------------------


CACHED_REQUEST: dict[str, Any] = {
    "max_tokens": 64000,
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
               {"type": "text", "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "messages": [
        {"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": PDF},
             "citations": {"enabled": True}, "title": "spec.pdf"},
            {"type": "text", "text": "What does the spec say?",
             "cache_control": {"type": "ephemeral", "ttl": "5m"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Look at the PDF.", "signature": "sig-1"},
            {"type": "text", "text": "Reading it."}]},
        {"role": "user", "content": "Go on."}],
    "thinking": {"type": "enabled", "budget_tokens": 16000},
    "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}],
    "metadata": {"user_id": "{\"device_id\":\"d1\"}"},
}


def test_a_messages_body_reaches_an_anthropic_upstream_with_only_the_model_replaced(gw, ups):
    claude, oa = ups
    claude.script(message(thinking("Checking."), "It says hi.",
                          usage={"input_tokens": 50, "output_tokens": 20,
                                 "cache_read_input_tokens": 1000,
                                 "cache_creation_input_tokens": 200}))
    with claude_sdk(gw) as client:
        raw = client.messages.with_raw_response.create(
            model="r", **CACHED_REQUEST,
            extra_headers={"anthropic-beta": "extended-cache-ttl-2025-04-11",
                           "x-claude-code-session-id": "s-1"})
        msg = raw.parse()
    [req] = claude.requests_to(MESSAGES)
    client_body = sent_body(raw)
    assert req.json == {**client_body, "model": "claude-sonnet-4-5"}
    assert req.json["system"][1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert req.json["messages"][0]["content"][0]["citations"] == {"enabled": True}
    assert req.headers["x-api-key"] == KEY
    assert "authorization" not in req.headers
    assert req.headers["anthropic-version"] == raw.http_request.headers["anthropic-version"]
    assert req.headers["anthropic-beta"] == "extended-cache-ttl-2025-04-11"
    assert "client-key" not in json.dumps(req.headers)
    assert oa.requests == []
    # The answer comes back as the upstream sent it.
    assert msg.id == "msg_fake1" and msg.model == "claude-sonnet-4-5"
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].signature == "sig-fake"
    assert msg.usage.cache_read_input_tokens == 1000
    assert msg.usage.cache_creation_input_tokens == 200
    assert raw.headers["x-humpyard-provider"] == "claude"
    [d] = decisions(gw)
    assert d["usage"] == {"input_tokens": 1250, "output_tokens": 20,
                          "cache_read_tokens": 1000, "cache_write_tokens": 200}
    # 50 plain input tokens at 3, 1000 read at 0.3, 200 written at 3.75, 20 out at 15
    assert d["cost_usd"] == pytest.approx((50 * 3 + 1000 * 0.3 + 200 * 3.75 + 20 * 15) / 1e6)
    assert not any("cache_control" in n or "billing" in n for n in d["notes"]), d["notes"]


def test_stats_show_cache_hits_and_their_price(gw, ups):
    claude, _ = ups
    usage = {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 900}
    claude.script(message("a", usage=usage), message("b", usage=usage))
    with claude_sdk(gw) as client:
        client.messages.create(model="r", max_tokens=8, messages=HELLO)
        with client.messages.stream(model="r", max_tokens=8, messages=HELLO) as stream:
            stream.get_final_message()
    decisions(gw, 2)
    with gw.client() as c:
        groups = {g["key"]: g for g in c.get("/v1/stats", params={
            "group_by": "target"}).json()["groups"]}
    sonnet = groups["sonnet"]
    assert (sonnet["input_tokens"], sonnet["cache_read_tokens"],
            sonnet["cache_write_tokens"]) == (2000, 1800, 0)
    assert sonnet["cache_hit_ratio"] == 0.9
    assert sonnet["cost_usd"] == pytest.approx(2 * (100 * 3 + 900 * 0.3 + 10 * 15) / 1e6)


def test_a_streamed_messages_answer_is_relayed_event_for_event(gw, ups):
    claude, _ = ups
    claude.script(message(thinking("Think."), "Let me look.",
                          tool_use("get_weather", {"city": "Oslo"}, "toolu_1"),
                          usage={"input_tokens": 8, "output_tokens": 30,
                                 "cache_read_input_tokens": 500}))
    with claude_sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=2048, tools=[WEATHER], messages=HELLO,
            thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        events = list(stream)
        final = stream.get_final_message()
    [req] = claude.requests_to(MESSAGES)
    assert req.json["stream"] is True and req.json["thinking"]["budget_tokens"] == 1024
    assert "stream_options" not in req.json
    kinds = [e.type for e in events]
    assert "ping" not in kinds  # the SDK skips pings; they went through all the same
    assert final.id == "msg_fake1" and final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].signature == "sig-fake"
    assert final.content[2].input == {"city": "Oslo"}
    assert final.usage.cache_read_input_tokens == 500 and final.usage.output_tokens == 30
    [d] = decisions(gw)
    assert d["outcome"] == "ok" and d["stream"] is True
    assert d["usage"] == {"input_tokens": 508, "output_tokens": 30,
                          "cache_read_tokens": 500, "cache_write_tokens": 0}


def test_the_raw_stream_bytes_are_the_upstreams(gw, ups):
    claude, _ = ups
    step = message("one two")
    claude.script(step)
    with gw.client() as c, c.stream("POST", "/v1/messages", json={
            "model": "r", "max_tokens": 16, "stream": True, "messages": HELLO}) as r:
        body = b"".join(r.iter_raw())
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert body.startswith(b"event: message_start\n")
    assert b"event: ping\n" in body and body.endswith(b'event: message_stop\ndata: {"type": '
                                                       b'"message_stop"}\n\n')


# -- OpenAI chat clients are translated ---------------------------------------------------


def test_an_openai_client_is_translated_to_messages_and_back(gw, ups):
    claude, _ = ups
    claude.script(message("Let me check.", tool_use("get_weather", {"city": "Oslo"}, "toolu_9"),
                          usage={"input_tokens": 40, "output_tokens": 12,
                                 "cache_read_input_tokens": 60}))
    with openai_sdk(gw) as client:
        done = client.chat.completions.create(
            model="r", tools=[OPENAI_WEATHER], tool_choice="required", stop=["END"],
            messages=[{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "Weather in Oslo?"}])
    [req] = claude.requests_to(MESSAGES)
    sent = req.json
    assert sent["model"] == "claude-sonnet-4-5" and sent["system"] == "be brief"
    assert sent["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Weather in Oslo?"}]}]
    assert sent["tools"] == [WEATHER] and sent["tool_choice"] == {"type": "any"}
    assert sent["max_tokens"] == 4096 and sent["stop_sequences"] == ["END"]
    assert "stream" not in sent
    assert req.headers["x-api-key"] == KEY and "authorization" not in req.headers
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert "anthropic-beta" not in req.headers
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    [call] = choice.message.tool_calls
    assert call.id == "toolu_9" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    assert done.usage.prompt_tokens == 100 and done.usage.completion_tokens == 12
    assert done.usage.prompt_tokens_details.cached_tokens == 60
    [d] = decisions(gw)
    assert d["protocol"] == "openai"
    assert "max_tokens set to 4096: Anthropic requires one" in d["notes"]
    assert d["attempts"][0]["notes"] == ["max_tokens set to 4096: Anthropic requires one"]
    assert d["usage"]["cache_read_tokens"] == 60


def test_an_openai_stream_is_translated_chunk_by_chunk(gw, ups):
    claude, _ = ups
    claude.script(message(thinking("Hmm."), "Hello there friend",
                          tool_use("get_weather", {"city": "Bergen"}, "toolu_2"),
                          usage={"input_tokens": 7, "output_tokens": 9,
                                 "cache_creation_input_tokens": 3}))
    with openai_sdk(gw) as client:
        chunks = list(client.chat.completions.create(
            model="r", max_tokens=300, tools=[OPENAI_WEATHER], messages=HELLO, stream=True,
            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                        for c in chunks if c.choices)
    args = "".join(tc.function.arguments or "" for c in chunks if c.choices
                   for tc in c.choices[0].delta.tool_calls or ())
    assert text == "Hello there friend" and reasoning == "Hmm."
    assert json.loads(args) == {"city": "Bergen"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and
            c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage.prompt_tokens == 10 and chunks[-1].usage.completion_tokens == 9
    [req] = claude.requests_to(MESSAGES)
    assert req.json["stream"] is True and "stream_options" not in req.json
    [d] = decisions(gw)
    assert d["outcome"] == "ok"
    assert d["usage"] == {"input_tokens": 10, "output_tokens": 9, "cache_read_tokens": 0,
                          "cache_write_tokens": 3}


def test_an_openai_stream_without_include_usage_gets_no_usage_chunk(gw, ups):
    with openai_sdk(gw) as client:
        chunks = list(client.chat.completions.create(model="r", messages=HELLO, stream=True))
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "hello"
    [d] = decisions(gw)
    assert d["usage"]["output_tokens"] == 5  # recorded all the same


# -- failover and the failure classes -------------------------------------------------------


def test_an_overloaded_anthropic_upstream_fails_over_to_the_next_target(gw, ups):
    claude, oa = ups
    claude.script(error(529, "overloaded_error", "Overloaded"),
                  error(529, "overloaded_error", "Overloaded"))
    oa.script(ok("from the backup"), ok("backup streamed"))
    with claude_sdk(gw) as client:
        msg = client.messages.create(model="r", max_tokens=32, messages=HELLO)
        with client.messages.stream(model="r", max_tokens=32, messages=HELLO) as stream:
            streamed = "".join(stream.text_stream)
    assert msg.content[0].text == "from the backup"
    assert streamed == "backup streamed"
    # The backup got the translated chat body, not the Anthropic one.
    first, second = [r.json for r in oa.requests_to(CHAT)]
    assert first["model"] == "ma" and first["messages"] == HELLO
    for d in decisions(gw, 2):
        assert [(a["provider"], a["status"], a["failure_class"]) for a in d["attempts"]] == [
            ("claude", 529, "server_error"), ("oa", 200, None)]
        assert d["target"] == "backup"


def test_an_openai_client_fails_over_from_anthropic_too(gw, ups):
    claude, oa = ups
    claude.script(error(529, "overloaded_error", "Overloaded"))
    oa.script(ok("ok from oa"))
    with openai_sdk(gw) as client:
        done = client.chat.completions.create(model="r", messages=HELLO)
    assert done.choices[0].message.content == "ok from oa"


def test_an_error_event_before_content_fails_over(gw, ups):
    claude, oa = ups
    claude.script(stream_error("overloaded_error", "Overloaded"))
    oa.script(ok("after the error"))
    with claude_sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=32, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
    assert text == "after the error"
    [d] = decisions(gw)
    assert d["attempts"][0]["failure_class"] == "server_error"
    assert "Overloaded" in d["attempts"][0]["error"]


def test_an_error_event_after_content_ends_the_stream_with_an_error(gw, ups):
    claude, oa = ups
    claude.script(stream_error("overloaded_error", "Overloaded", after="partial answer"))
    with claude_sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=32, messages=HELLO) as stream:
        with pytest.raises(anthropic.APIStatusError) as caught:
            for _ in stream:
                pass
    assert "Overloaded" in str(caught.value)
    # the upstream's own type, as it sent it (it was api_error): Claude Code backs off
    # from an overloaded_error
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert oa.requests == []
    [d] = decisions(gw)
    assert d["outcome"] == "stream_broken" and "Overloaded" in d["error"]


def test_an_openai_stream_breaking_after_content_ends_with_an_error_chunk(gw, ups):
    claude, _ = ups
    claude.script(stream_error("api_error", "Internal", after="partial"))
    with gw.client() as c, c.stream("POST", "/v1/chat/completions", json={
            "model": "r", "stream": True, "messages": HELLO}) as r:
        body = b"".join(r.iter_raw()).decode()
    assert '"content":"partial"' in body
    assert body.rstrip().splitlines()[-1].startswith('data: {"error"')
    assert "[DONE]" not in body


def _one_target(extra_route: str = "") -> dict[str, str]:
    return {"route": extra_route}


@pytest.mark.parametrize(("step", "failure_class", "crosses"), [
    (error(529, "overloaded_error", "Overloaded"), "server_error", True),
    (error(500, "api_error", "Internal server error"), "server_error", True),
    (error(400, "invalid_request_error", "prompt is too long: 212345 tokens > 200000 maximum"),
     "overflow", True),
    (error(404, "not_found_error", "model: claude-sonnet-4-5"), "unavailable", False),
    (error(401, "authentication_error", "invalid x-api-key"), "unavailable", False),
    (error(403, "permission_error", "Your API key does not have permission"), "forbidden",
     True),
    (error(429, "rate_limit_error", "Number of requests has exceeded your rate limit"),
     "rate_limit", True),
], ids=["529", "500", "too-long", "model-gone", "401", "403", "429"])
def test_anthropic_errors_are_classified_like_the_rest(ups, step, failure_class, crosses):
    claude, oa = ups
    claude.script(step)
    oa.script(ok("backup"))
    with gateway_for(ups) as gw, claude_sdk(gw) as client:
        if crosses:
            assert client.messages.create(model="r", max_tokens=8,
                                          messages=HELLO).content[0].text == "backup"
        else:  # unavailable does not cross targets unless fallback_on says so
            with pytest.raises(anthropic.APIStatusError) as caught:
                client.messages.create(model="r", max_tokens=8, messages=HELLO)
            assert caught.value.status_code == step.code
        [d] = decisions(gw)
    assert d["attempts"][0]["failure_class"] == failure_class
    assert d["attempts"][0]["error"] == step.message
    assert len(d["attempts"]) == (2 if crosses else 1)


def test_a_gone_model_moves_to_the_next_target_when_fallback_on_says_so(ups):
    claude, oa = ups
    claude.script(error(404, "not_found_error", "model: claude-sonnet-4-5"))
    with gateway_for(ups, route='fallback_on = ["unavailable"]') as gw, \
            openai_sdk(gw) as client:
        assert client.chat.completions.create(
            model="r", messages=HELLO).choices[0].message.content == "hello"
        [d] = decisions(gw)
    assert [a["failure_class"] for a in d["attempts"]] == ["unavailable", None]


def test_a_429_with_retry_after_cools_the_endpoint_for_that_long(ups):
    claude, oa = ups
    claude.script(error(429, "rate_limit_error", "slow down", headers={"retry-after": "7"}))
    text = config(claude.url, oa.url).replace("failure_threshold = 0", "failure_threshold = 3")
    with running_gateway(text, env=ENV) as gw, claude_sdk(gw) as client:
        assert client.messages.create(model="r", max_tokens=8,
                                      messages=HELLO).content[0].text == "hello"
        # cooling: the next request goes straight to the backup
        client.messages.create(model="r", max_tokens=8, messages=HELLO)
        first, second = decisions(gw, 2)
    assert first["attempts"][0]["stated_retry_after_ms"] == 7000
    assert first["attempts"][0]["retry_after_ms"] == 7000
    assert second["cold_targets"] == ["sonnet"] and second["target"] == "backup"
    assert len(claude.requests_to(MESSAGES)) == 1


def test_an_invalid_request_stops_at_once_in_anthropics_shape(gw, ups):
    claude, oa = ups
    claude.script(error(400, "invalid_request_error", "messages.0.content: bad block"))
    with claude_sdk(gw) as client, pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="r", max_tokens=8, messages=HELLO)
    assert caught.value.body["error"]["message"] == "messages.0.content: bad block"
    assert oa.requests == []


def test_the_upstream_key_never_reaches_the_record(gw, ups):
    claude, _ = ups
    claude.script(error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    with claude_sdk(gw) as client, pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="r", max_tokens=8, messages=HELLO)
    assert KEY not in str(caught.value.body)
    [d] = decisions(gw)
    assert KEY not in json.dumps(d)


def test_a_200_that_is_not_a_message_fails_over(gw, ups):
    claude, oa = ups
    claude.script(status(200, {"unexpected": True}))
    oa.script(ok("sane"))
    with claude_sdk(gw) as client:
        assert client.messages.create(model="r", max_tokens=8,
                                      messages=HELLO).content[0].text == "sane"
    [d] = decisions(gw)
    assert d["attempts"][0]["error"] == "upstream answered 200 with a body that is not a message"
    assert d["attempts"][0]["failure_class"] == "server_error"


# -- headers ---------------------------------------------------------------------------


def test_static_betas_and_version_of_the_provider(ups):
    claude, _ = ups
    headers = 'headers = { "anthropic-version" = "2024-01-01", "anthropic-beta" = "always-on" }'
    with gateway_for(ups, claude_headers=headers) as gw:
        with openai_sdk(gw) as client:
            client.chat.completions.create(model="r", messages=HELLO)
        with claude_sdk(gw) as client:
            raw = client.messages.with_raw_response.create(
                model="r", max_tokens=8, messages=HELLO,
                extra_headers={"anthropic-beta": "b1,always-on"})
        # the header on two lines is one list in order (it kept the last line alone)
        httpx.post(f"{gw.url}/v1/messages", headers=[
            ("x-api-key", "client-key"), ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "b1"), ("anthropic-beta", "b2")],
            json={"model": "r", "max_tokens": 8, "messages": HELLO}).raise_for_status()
    translated, native, split = claude.requests_to(MESSAGES)
    assert split.headers["anthropic-beta"] == "always-on,b1,b2"
    assert translated.headers["anthropic-version"] == "2024-01-01"
    assert translated.headers["anthropic-beta"] == "always-on"
    # the client's version wins: its body is written for it
    assert native.headers["anthropic-version"] == raw.http_request.headers["anthropic-version"]
    assert native.headers["anthropic-beta"] == "always-on,b1"


# -- per-endpoint fitting ------------------------------------------------------------------


def test_max_output_tokens_clamps_a_passed_through_body(ups):
    claude, _ = ups
    with gateway_for(ups, endpoint=", max_output_tokens = 8192") as gw, \
            claude_sdk(gw) as client:
        client.messages.create(model="r", max_tokens=64000, messages=HELLO,
                               thinking={"type": "enabled", "budget_tokens": 16000})
        [d] = decisions(gw)
    [req] = claude.requests_to(MESSAGES)
    assert req.json["max_tokens"] == 8192
    assert req.json["thinking"] == {"type": "enabled", "budget_tokens": 8191}
    assert d["notes"] == [
        "max_tokens 64000 clamped to 8192: the endpoint's max_output_tokens",
        "thinking.budget_tokens 16000 lowered to 8191: it must stay below max_tokens"]


def test_max_output_tokens_clamps_a_translated_body(ups):
    claude, _ = ups
    with gateway_for(ups, endpoint=", max_output_tokens = 1000") as gw, \
            openai_sdk(gw) as client:
        client.chat.completions.create(model="r", max_completion_tokens=5000, messages=HELLO)
        [d] = decisions(gw)
    [req] = claude.requests_to(MESSAGES)
    assert req.json["max_tokens"] == 1000
    assert "max_completion_tokens 5000 clamped to 1000: the endpoint's max_output_tokens" \
        in d["notes"]


def test_an_endpoint_without_reasoning_gets_no_thinking(ups):
    claude, _ = ups
    with gateway_for(ups, endpoint=", reasoning = false") as gw:
        with claude_sdk(gw) as client:
            client.messages.create(model="r", max_tokens=4000, messages=HELLO,
                                   thinking={"type": "enabled", "budget_tokens": 2000})
        with openai_sdk(gw) as client:
            client.chat.completions.create(model="r", max_tokens=4000, messages=HELLO,
                                           reasoning_effort="medium")
        native, translated = decisions(gw, 2)
    first, second = claude.requests_to(MESSAGES)
    assert "thinking" not in first.json and "thinking" not in second.json
    assert native["notes"] == ["thinking 'enabled' dropped: the endpoint takes no reasoning"]
    assert "reasoning_effort 'medium' dropped: the endpoint takes none" in translated["notes"]


def test_an_openai_endpoint_without_reasoning_gets_no_reasoning_effort(ups):
    claude, oa = ups
    text = config(claude.url, oa.url).replace('model = "ma" }',
                                              'model = "ma", reasoning = false }')
    with running_gateway(text, env=ENV) as gw, openai_sdk(gw) as client:
        client.chat.completions.create(model="backup", messages=HELLO, reasoning_effort="high")
        [d] = decisions(gw)
    [req] = oa.requests_to(CHAT)
    assert "reasoning_effort" not in req.json
    assert d["notes"] == ["reasoning_effort 'high' dropped: the endpoint takes none"]


def test_notes_of_a_failed_translation_stay_on_their_attempt(gw, ups):
    """An Anthropic client's decode notes concern the chat body: a natively served
    answer does not carry them, a translated one (after failover) does."""
    claude, oa = ups
    cached = {"type": "ephemeral"}
    claude.script(error(529, "overloaded_error", "Overloaded"))
    with claude_sdk(gw) as client:
        client.messages.create(model="r", max_tokens=8, system=[
            {"type": "text", "text": "sys", "cache_control": cached}], messages=HELLO)
        client.messages.create(model="r", max_tokens=8, system=[
            {"type": "text", "text": "sys", "cache_control": cached}], messages=HELLO)
    translated, native = decisions(gw, 2)
    assert translated["target"] == "backup"
    assert any("cache_control" in n for n in translated["notes"])
    assert native["target"] == "sonnet" and native["notes"] == []


def test_a_tool_result_round_trip_through_the_openai_sdk(gw, ups):
    claude, _ = ups
    claude.script(message(tool_use("get_weather", {"city": "Oslo"}, "toolu_a")),
                  message("Sunny."))
    with openai_sdk(gw) as client:
        first = client.chat.completions.create(model="r", tools=[OPENAI_WEATHER],
                                               messages=HELLO)
        call = first.choices[0].message.tool_calls[0]
        second = client.chat.completions.create(model="r", tools=[OPENAI_WEATHER], messages=[
            *HELLO, first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}])
    assert second.choices[0].message.content == "Sunny."
    _, later = bodies(claude.requests)
    assert later["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Oslo"}}]}
    assert later["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny, 21C"}]}


def test_an_anthropic_client_reaches_an_openai_upstream_as_before(ups):
    claude, oa = ups
    text = config(claude.url, oa.url)
    with running_gateway(text, env=ENV) as gw, claude_sdk(gw) as client:
        oa.script(tool_call("get_weather", {"city": "Oslo"}))
        msg = client.messages.create(model="backup", max_tokens=8, tools=[WEATHER],
                                     messages=HELLO)
    assert msg.content[0].type == "tool_use"
    assert claude.requests == []


# -- count_tokens ----------------------------------------------------------------------------


def test_count_tokens_goes_to_the_anthropic_upstream_that_would_serve(gw, ups):
    claude, oa = ups
    claude.script(count(1234))
    with claude_sdk(gw) as client:
        raw = client.messages.with_raw_response.count_tokens(
            model="r", system=[{"type": "text", "text": "sys",
                                "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            tools=[WEATHER], messages=HELLO, thinking={"type": "enabled", "budget_tokens": 2000},
            extra_headers={"anthropic-beta": "token-counting-2024-11-01"})
    assert raw.parse().input_tokens == 1234
    assert raw.headers["x-humpyard-token-count"] == "upstream"
    [req] = claude.requests_to(COUNT)
    assert req.json == {**sent_body(raw), "model": "claude-sonnet-4-5"}
    assert req.headers["x-api-key"] == KEY and "authorization" not in req.headers
    assert req.headers["anthropic-beta"] == "token-counting-2024-11-01"
    assert claude.requests_to(MESSAGES) == [] and oa.requests == []


def test_count_tokens_falls_back_to_the_estimate_when_the_upstream_fails(ups):
    claude, oa = ups
    claude.script(error(500, "api_error", "Internal"))
    text = config(claude.url, oa.url).replace("failure_threshold = 0", "failure_threshold = 1")
    with running_gateway(text, env=ENV) as gw, claude_sdk(gw) as client:
        raw = client.messages.with_raw_response.count_tokens(model="r", messages=HELLO)
        estimate = raw.parse().input_tokens
        assert raw.headers["x-humpyard-token-count"] == "estimate"
        assert estimate > 0
        # the failed count did not cool the endpoint: a real request still goes there
        assert client.messages.create(model="r", max_tokens=8,
                                      messages=HELLO).content[0].text == "hello"
    assert len(claude.requests_to(COUNT)) == 1


def test_count_tokens_is_estimated_for_an_openai_target_or_an_unknown_model(gw, ups):
    claude, oa = ups
    with claude_sdk(gw) as client:
        for model in ("backup", "no-such-route"):
            raw = client.messages.with_raw_response.count_tokens(model=model, messages=HELLO)
            assert raw.headers["x-humpyard-token-count"] == "estimate"
            assert raw.parse().input_tokens > 0
    assert claude.requests == [] and oa.requests == []


# -- streams that end badly ------------------------------------------------------------------


@dataclass(frozen=True)
class RawStream(Step):
    """A 200 event stream of exactly ``chunks``, then a clean end (or a dropped
    connection with ``drop``)."""

    chunks: tuple[bytes, ...]
    drop: bool = False

    async def respond(self, ex: Exchange) -> bool:
        await ex.start_stream()
        for chunk in self.chunks:
            await ex.send_chunk(chunk)
        if self.drop:
            ex.drop()
            return False
        await ex.end_stream()
        return True


START = event("message_start", {"type": "message_start", "message": {
    "id": "msg_x", "type": "message", "role": "assistant", "model": "m", "content": [],
    "usage": {"input_tokens": 3, "output_tokens": 1}}})
DELTA = event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": "part"}})


@pytest.mark.parametrize(("step", "failure_class"), [
    (RawStream((START, b"event: content_block_delta\ndata: {not json\n\n")), "server_error"),
    (RawStream((START,)), "server_error"),
    (RawStream((START,), drop=True), "connection"),
], ids=["invalid-event", "closed-clean", "dropped"])
def test_a_stream_that_breaks_before_content_fails_over(gw, ups, step, failure_class):
    claude, oa = ups
    claude.script(step)
    oa.script(ok("rescued"))
    with claude_sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=8, messages=HELLO) as stream:
        assert "".join(stream.text_stream) == "rescued"
    [d] = decisions(gw)
    assert [a["failure_class"] for a in d["attempts"]] == [failure_class, None]


@pytest.mark.parametrize("drop", [False, True], ids=["no-message-stop", "dropped"])
def test_a_stream_cut_after_content_is_broken_for_both_clients(gw, ups, drop):
    claude, oa = ups
    claude.script(RawStream((START, DELTA), drop=drop), RawStream((START, DELTA), drop=drop))
    with gw.client() as c:
        with c.stream("POST", "/v1/messages", json={
                "model": "r", "max_tokens": 8, "stream": True, "messages": HELLO}) as r:
            native = b"".join(r.iter_raw()).decode()
        with c.stream("POST", "/v1/chat/completions", json={
                "model": "r", "stream": True, "messages": HELLO}) as r:
            chat = b"".join(r.iter_raw()).decode()
    assert "part" in native and native.rstrip().splitlines()[-2] == "event: error"
    assert '"content":"part"' in chat and '"error"' in chat.rstrip().splitlines()[-1]
    assert oa.requests == []
    for d in decisions(gw, 2):
        assert d["outcome"] == "stream_broken"


# -- a Responses client reaches an Anthropic upstream translated ------------------------


def test_a_responses_client_is_translated_to_and_from_an_anthropic_upstream(gw, ups):
    claude, _ = ups
    claude.script(message("bonjour", usage={"input_tokens": 9, "output_tokens": 2}),
                  message(tool_use("get_weather", {"city": "Paris"})))
    with openai_sdk(gw) as client:
        answer = client.responses.create(model="r", instructions="Be brief.", input="hello")
        assert answer.output_text == "bonjour"
        with client.responses.stream(model="r", input="weather in Paris?",
                                     tools=[{"type": "function", "name": "get_weather",
                                             "parameters": WEATHER["input_schema"]}]) as s:
            final = s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather",
                                                                   {"city": "Paris"})]
    first, second = bodies(claude.requests)
    assert first["system"] == "Be brief."
    assert first["messages"] == [{"role": "user", "content": [{"type": "text",
                                                                "text": "hello"}]}]
    assert second["stream"] is True and second["tools"][0]["name"] == "get_weather"
    d = decisions(gw, 2)
    assert [x["protocol"] for x in d] == ["responses", "responses"]
    assert [x["target"] for x in d] == ["sonnet", "sonnet"]
