"""The Responses API end to end: the official ``openai`` SDK against ``POST /v1/responses``.

The gateway runs on loopback in front of scripted OpenAI chat fake upstreams;
the SDK's ``responses.create`` and ``responses.stream`` talk to it as Codex CLI
would. Each test checks both sides: what the SDK parsed, and what the upstream
received (tools, tool outputs, streaming options, failover).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway, two_targets
from tests.support.steps import (
    fail_before_content,
    ok,
    status,
    stream_error,
    stream_then_fail,
    tool_call,
)

CHAT = "/v1/chat/completions"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42m"
         "Nk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")



@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


@pytest.fixture
def gw(ups: tuple[FakeUpstream, FakeUpstream]) -> Iterator[Running]:
    a, b = ups
    with running_gateway(two_targets(a.url, b.url)) as g:
        yield g


@contextmanager
def sdk(gw: Running, **kw: Any) -> Iterator[openai.OpenAI]:
    """An SDK client for ``gw``; no retries, so each call is one gateway request."""
    with openai.OpenAI(base_url=gw.v1, api_key=kw.pop("api_key", "unused"), max_retries=0,
                       timeout=30, **kw) as client:
        yield client


def bodies(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests_to(CHAT)]


# -- buffered ------------------------------------------------------------------------


def test_create_plain_text(gw, ups):
    a, _ = ups
    a.script(ok("hello there", usage={"prompt_tokens": 12, "completion_tokens": 2}))
    with sdk(gw) as client:
        raw = client.responses.with_raw_response.create(
            model="r", instructions="be brief", input="hi", max_output_tokens=64,
            temperature=0.5, metadata={"job": "ci-7"})
        resp = raw.parse()
    assert resp.object == "response" and resp.status == "completed"
    assert resp.output_text == "hello there"
    assert resp.model == "r" and resp.id.startswith("resp_")
    assert resp.usage is not None and resp.usage.input_tokens == 12
    assert resp.usage.output_tokens == 2
    assert resp.metadata == {"job": "ci-7"} and resp.store is False
    assert raw.headers["x-humpyard-route"] == "r"
    assert raw.headers["x-humpyard-target"] == "first"
    [sent] = bodies(a)
    assert sent["model"] == "ma" and sent["max_tokens"] == 64 and sent["temperature"] == 0.5
    assert sent["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hi"}]
    [d] = gw.decisions()
    assert (d["protocol"], d["route"], d["target"], d["status"]) == ("responses", "r",
                                                                     "first", 200)
    assert d["usage"] == {"input_tokens": 12, "output_tokens": 2, "cache_read_tokens": 0,
                          "cache_write_tokens": 0}


def test_tool_round_trip(gw, ups):
    a, _ = ups
    a.script(tool_call("get_weather", {"city": "Oslo"}, call_id="call_1"),
             ok("Sunny in Oslo."))
    with sdk(gw) as client:
        first = client.responses.create(model="r", input="Weather in Oslo?", tools=[WEATHER],
                                        tool_choice="auto", parallel_tool_calls=False)
        [call] = first.output
        assert call.type == "function_call"
        assert (call.call_id, call.name, json.loads(call.arguments)) == \
            ("call_1", "get_weather", {"city": "Oslo"})
        second = client.responses.create(model="r", tools=[WEATHER], input=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name,
             "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id,
             "output": "sunny, 21 C"},
        ])
    assert second.output_text == "Sunny in Oslo."
    first_sent, second_sent = bodies(a)
    assert first_sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": WEATHER["parameters"]}}]
    assert first_sent["tool_choice"] == "auto" and first_sent["parallel_tool_calls"] is False
    msgs = second_sent["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    assert msgs[1]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}


def test_hosted_tool_beside_functions_is_dropped_with_a_note_and_counted(gw, ups):
    a, _ = ups
    with sdk(gw) as client:
        resp = client.responses.create(
            model="r", input="hi", tools=[WEATHER, {"type": "web_search"}],
            include=["reasoning.encrypted_content"], store=False, prompt_cache_key="sess-1")
    assert resp.output_text == "hello"
    [sent] = bodies(a)
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]
    assert "prompt_cache_key" not in sent and "include" not in sent
    [d] = gw.decisions()
    assert "built-in tool 'web_search' dropped: the upstream cannot run it" in d["notes"]
    metrics = httpx.get(gw.url + "/metrics").text
    for what in ("hosted_tool", "include", "prompt_cache_key"):
        assert f'humpyard_translation_drops_total{{protocol="responses",what="{what}"}} 1' \
            in metrics, what


def test_reasoning_items_are_dropped_with_notes(gw, ups):
    a, _ = ups
    with sdk(gw) as client:
        client.responses.create(model="r", reasoning={"effort": "high", "summary": "auto"},
                                input=[
            {"role": "user", "content": "first"},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": "gAAAA-opaque"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "user", "content": "second"}])
    [sent] = bodies(a)
    assert sent["reasoning_effort"] == "high"
    assert "gAAAA" not in json.dumps(sent)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    [d] = gw.decisions()
    assert "reasoning items dropped: the upstream takes none" in d["notes"]
    assert "encrypted reasoning content dropped: only OpenAI can read it" in d["notes"]


# -- streamed ------------------------------------------------------------------------


def test_stream_text(gw, ups):
    a, _ = ups
    a.script(ok(["Hel", "lo, ", "world"], usage={"prompt_tokens": 9, "completion_tokens": 3}))
    with sdk(gw) as client, client.responses.stream(model="r", input="hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == \
        ["Hel", "lo, ", "world"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == "Hello, world" and final.status == "completed"
    assert final.usage is not None and final.usage.input_tokens == 9
    [sent] = bodies(a)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    [d] = gw.decisions()
    assert d["protocol"] == "responses" and d["stream"] is True and d["status"] == 200


def test_stream_tool_call(gw, ups):
    a, _ = ups
    args = {"city": "Trondheim", "days": [1, 2, 3]}
    a.script(tool_call("get_weather", args, call_id="call_s"))
    with sdk(gw) as client, client.responses.stream(model="r", input="Weather?",
                                                    tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) >= 2 and json.loads("".join(deltas)) == args
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(done.arguments) == args
    [call] = final.output
    assert call.type == "function_call" and call.call_id == "call_s"
    assert json.loads(call.arguments) == args


def test_create_with_stream_true_gives_events(gw, ups):
    with sdk(gw) as client:
        stream = client.responses.create(model="r", input="hi", stream=True)
        with stream:
            kinds = [e.type for e in stream]
    kinds = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]  # deltas as one
    assert kinds == ["response.created", "response.in_progress",
                     "response.output_item.added", "response.content_part.added",
                     "response.output_text.delta", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done",
                     "response.completed"]


def test_failover_before_the_first_content(gw, ups):
    """The first target's stream breaks before any content: the second serves, and the
    client sees one clean stream."""
    a, b = ups
    a.script(fail_before_content())
    b.script(ok(["from ", "b"]))
    with sdk(gw) as client, client.responses.stream(model="r", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "from b" and final.status == "completed"
    [sent_a], [sent_b] = bodies(a), bodies(b)
    assert sent_a["model"] == "ma" and sent_b["model"] == "mb"
    assert sent_a["messages"] == sent_b["messages"] == [{"role": "user", "content": "hi"}]
    [d] = gw.decisions()
    assert [t["target"] for t in d["attempts"]] == ["first", "second"]
    assert d["target"] == "second" and d["status"] == 200


def test_buffered_failover_on_a_server_error(gw, ups):
    a, b = ups
    a.script(status(500))
    b.script(ok("from b"))
    with sdk(gw) as client:
        resp = client.responses.create(model="r", input="hi")
    assert resp.output_text == "from b"
    assert len(bodies(a)) == 1 and len(bodies(b)) == 1


@pytest.mark.parametrize("step", [stream_then_fail(["partial "]),
                                  stream_error("boom", after=["partial "])],
                         ids=["dropped", "error-event"])
def test_a_break_after_content_ends_with_error_and_failed(gw, ups, step):
    a, b = ups
    a.script(step)
    with sdk(gw) as client, client.responses.stream(model="r", input="hi") as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert "response.output_text.delta" in kinds
    assert kinds[-2:] == ["error", "response.failed"]
    assert events[-1].response.status == "failed"
    assert not bodies(b)  # after content nothing fails over
    [d] = gw.decisions()
    assert d["outcome"] == "stream_broken"


# -- errors ---------------------------------------------------------------------------


def test_refusals_are_in_the_responses_error_shape(gw, ups):
    a, _ = ups
    with sdk(gw) as client:
        with pytest.raises(openai.BadRequestError) as stored:
            client.responses.create(model="r", input="hi", store=True)
        with pytest.raises(openai.BadRequestError) as hosted:
            client.responses.create(model="r", input="hi", tools=[{"type": "web_search"}])
        with pytest.raises(openai.BadRequestError) as previous:
            client.responses.create(model="r", input="hi", previous_response_id="resp_1")
        with pytest.raises(openai.NotFoundError) as unknown:
            client.responses.create(model="nope", input="hi")
    assert stored.value.body["message"].startswith("store: true is not supported")
    assert stored.value.body["type"] == "invalid_request_error"
    assert stored.value.body["code"] == "invalid_request" and "param" in stored.value.body
    assert hosted.value.body["message"].startswith("tools[0].type: built-in tool 'web_search'")
    assert previous.value.body["message"].startswith("previous_response_id: not supported")
    assert unknown.value.status_code == 404
    assert not bodies(a)
    outcomes = {d["status"] for d in gw.decisions()}
    assert outcomes == {400, 404}


def test_upstream_failure_everywhere_is_a_5xx_in_the_responses_shape(gw, ups):
    a, b = ups
    a.script(status(500))
    b.script(status(503))
    with sdk(gw) as client, pytest.raises(openai.APIStatusError) as err:
        client.responses.create(model="r", input="hi")
    assert err.value.status_code >= 500
    assert set(err.value.body) >= {"message", "type", "code", "param"}


# -- selectors -----------------------------------------------------------------------


SELECTORS = """
[routes.tooled]
targets = ["second"]
[routes.seeing]
targets = ["second"]
[routes.big]
targets = ["second"]
[[select]]
name = "images"
when = { model = "auto", images = true }
route = "seeing"
[[select]]
name = "tools"
when = { model = "auto", tools = true }
route = "tooled"
[[select]]
name = "big"
when = { model = "auto", prompt_tokens = { min = 2000 } }
route = "big"
[[select]]
name = "rest"
when = { model = "auto" }
route = "r"
"""


def test_selectors_see_tools_images_and_prompt_size(ups):
    a, b = ups
    with running_gateway(two_targets(a.url, b.url, SELECTORS)) as gw, sdk(gw) as client:
        rules = []
        for kw in ({"input": "hi", "tools": [WEATHER]},
                   {"input": [{"role": "user", "content": [
                       {"type": "input_text", "text": "what is this?"},
                       {"type": "input_image", "image_url": PIXEL}]}]},
                   {"input": "long " * 4000},
                   {"input": "hi"}):
            raw = client.responses.with_raw_response.create(model="auto", **kw)
            rules.append(raw.headers["x-humpyard-rule"])
    assert rules == ["tools", "images", "big", "rest"]
    image_body = bodies(b)[1]
    assert image_body["messages"][0]["content"][1] == {"type": "image_url",
                                                       "image_url": {"url": PIXEL}}


def test_stats_group_responses_requests_by_route(gw, ups):
    with sdk(gw) as client:
        client.responses.create(model="r", input="hi")
        client.responses.create(model="r", input="again")
    r = httpx.get(gw.url + "/v1/stats", params={"group_by": "route"})
    [group] = [g for g in r.json()["groups"] if g["key"] == "r"]
    assert group["requests"] == 2
