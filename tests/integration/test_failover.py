"""Failover as seed 002 "Failover" and ADR 0023 give it, over real sockets.

Each test runs the real gateway on loopback in front of scripted fake
upstreams and talks to it with the official openai SDK or httpx.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.servers import closed_port_url
from tests.support.steps import (
    fail_before_content,
    ok,
    stall,
    status,
    stream_error,
    stream_then_fail,
)

MSG = [{"role": "user", "content": "hello"}]


def two_targets(a: str, b: str, *, route_extra: str = "", provider_extra: str = "",
                second_endpoint: str | None = None) -> str:
    eps_a = '{ provider = "a", model = "ma" }'
    if second_endpoint:
        eps_a += ', { provider = "c", model = "mc" }'
    text = f"""
[providers.a]
base_url = "{a}"
{provider_extra}
[providers.b]
base_url = "{b}"
{provider_extra}
"""
    if second_endpoint:
        text += f'[providers.c]\nbase_url = "{second_endpoint}"\n{provider_extra}\n'
    text += f"""
[targets.first]
class = "public"
endpoints = [{eps_a}]
[targets.second]
class = "paid"
endpoints = [{{ provider = "b", model = "mb" }}]
[routes.r]
type = "passthrough"
targets = ["first", "second"]
{route_extra}
[health]
failure_threshold = 0
"""
    return text


def chat(url: str, **extra: object) -> httpx.Response:
    with httpx.Client(timeout=30) as c:
        return c.post(url + "/v1/chat/completions",
                      json={"model": "r", "messages": MSG, **extra})


@pytest.fixture
def ups():
    with FakeUpstream() as a, FakeUpstream() as b, FakeUpstream() as c:
        yield a, b, c


def test_openai_sdk_buffered_and_streamed(ups):
    a, b, _ = ups
    a.script(ok("hello there"), ok(["hel", "lo ", "there"]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused")
        raw = client.chat.completions.with_raw_response.create(model="r", messages=MSG)
        resp = raw.parse()
        assert resp.choices[0].message.content == "hello there"
        assert raw.headers["x-humpyard-route"] == "r"
        assert raw.headers["x-humpyard-target"] == "first"
        assert raw.headers["x-humpyard-provider"] == "a"
        assert raw.headers["x-humpyard-rule"] == "default"
        assert raw.headers["x-humpyard-request-id"].startswith("req_")
        chunks = list(client.chat.completions.create(
            model="r", messages=MSG, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "hello there"
        assert chunks[-1].usage is not None
    assert a.requests[0].json["model"] == "ma"


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503, 529])
def test_retryable_statuses_move_to_next_endpoint_and_target(ups, code):
    a, b, c = ups
    a.script(status(code, {"error": {"message": f"boom {code}"}}))
    c.script(status(code, {"error": {"message": f"boom {code}"}}))
    with running_gateway(two_targets(a.url, b.url, second_endpoint=c.url)) as gw:
        r = chat(gw.url)
    assert r.status_code == 200
    assert r.headers["x-humpyard-target"] == "second"
    assert len(a.requests) == 1 and len(c.requests) == 1 and len(b.requests) == 1


def test_endpoint_rotation_within_target(ups):
    a, b, c = ups
    a.script(status(500, {"error": {"message": "down"}}))
    with running_gateway(two_targets(a.url, b.url, second_endpoint=c.url)) as gw:
        r = chat(gw.url)
    assert r.status_code == 200
    assert r.headers["x-humpyard-target"] == "first"
    assert r.headers["x-humpyard-provider"] == "c"
    assert b.requests == []


@pytest.mark.parametrize("code", [400, 422])
def test_request_errors_stop_at_once(ups, code):
    a, b, c = ups
    a.script(status(code, {"error": {"message": "bad field foo"}}))
    with running_gateway(two_targets(a.url, b.url, second_endpoint=c.url)) as gw:
        r = chat(gw.url)
    assert r.status_code == code
    assert r.json()["error"]["message"] == "bad field foo"
    # relayed: the type its status has at OpenAI (it was api_error for every status)
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["code"] == "upstream_error"
    assert c.requests == [] and b.requests == []


@pytest.mark.parametrize("code", [401, 402, 404, 410])
def test_unavailable_moves_within_target_not_across_by_default(ups, code):
    a, b, c = ups
    a.script(status(code, {"error": {"message": "gone"}}))
    c.script(status(code, {"error": {"message": "gone here too"}}))
    with running_gateway(two_targets(a.url, b.url, second_endpoint=c.url)) as gw:
        r = chat(gw.url)
    assert r.status_code == code
    assert r.json()["error"]["message"] == "gone here too"
    assert len(c.requests) == 1 and b.requests == []


def test_unavailable_crosses_targets_when_opted_in(ups):
    a, b, _ = ups
    a.script(status(404, {"error": {"message": "no such model"}}))
    with running_gateway(two_targets(a.url, b.url,
                                     route_extra='fallback_on = ["unavailable"]')) as gw:
        r = chat(gw.url)
    assert r.status_code == 200 and r.headers["x-humpyard-target"] == "second"


def test_model_gone_400_is_unavailable(ups):
    a, b, c = ups
    a.script(status(400, {"error": {"message": "x", "code": "model_not_found"}}))
    with running_gateway(two_targets(a.url, b.url, second_endpoint=c.url)) as gw:
        r = chat(gw.url)
    assert r.status_code == 200 and r.headers["x-humpyard-provider"] == "c"


def test_413_is_overflow_and_falls_through(ups):
    a, b, _ = ups
    a.script(status(413, {"error": {"message": "Request too large: tokens per minute"}}))
    with running_gateway(two_targets(a.url, b.url,
                                     route_extra='fallback_on = ["overflow"]')) as gw:
        r = chat(gw.url)
    assert r.status_code == 200 and r.headers["x-humpyard-target"] == "second"


def test_fallback_on_taken_as_written(ups):
    a, b, _ = ups
    a.script(status(429, {"error": {"message": "slow down"}}))
    with running_gateway(two_targets(a.url, b.url,
                                     route_extra='fallback_on = ["overflow"]')) as gw:
        r = chat(gw.url)
    assert r.status_code == 429
    assert r.json()["error"]["message"] == "slow down"
    assert "retry-after" not in r.headers  # the upstream stated no time
    assert b.requests == []


def test_last_stated_retry_time_is_passed_to_the_client(ups):
    a, b, _ = ups
    a.script(status(429, {"error": {"message": "Please try again in 7.2s"}}))
    with running_gateway(two_targets(a.url, b.url, route_extra="fallback_on = []")) as gw:
        r = chat(gw.url)
    assert r.status_code == 429 and r.headers["retry-after"] == "8"
    assert r.json()["error"]["type"] == "rate_limit_error"  # as the gateway's own 429s


def test_fallback_on_empty_turns_target_fallback_off(ups):
    a, b, _ = ups
    a.script(status(500, {"error": {"message": "oops"}}))
    with running_gateway(two_targets(a.url, b.url, route_extra="fallback_on = []")) as gw:
        r = chat(gw.url)
    assert r.status_code == 500 and b.requests == []


def test_everything_unreachable_is_502_and_names_the_cause():
    dead = closed_port_url()
    with running_gateway(two_targets(dead, dead)) as gw:
        r = chat(gw.url)
    assert r.status_code == 502
    msg = r.json()["error"]["message"]
    assert "refused" in msg and "127.0.0.1:" in msg


def test_timeout_is_504(ups):
    a, b, _ = ups
    a.script(stall())
    b.script(stall())
    with running_gateway(two_targets(a.url, b.url,
                                     provider_extra="timeout_secs = 0.3")) as gw:
        r = chat(gw.url)
    assert r.status_code == 504
    assert "timeout" in r.json()["error"]["message"]


def test_max_retries_retries_same_endpoint(ups):
    a, b, _ = ups
    a.script(status(500, {"error": {"message": "x"}}))
    with running_gateway(two_targets(a.url, b.url, provider_extra="max_retries = 1")) as gw:
        r = chat(gw.url)
    assert r.status_code == 200 and r.headers["x-humpyard-target"] == "first"
    assert len(a.requests) == 2 and b.requests == []


@pytest.mark.parametrize("step", [fail_before_content, lambda: stream_error("oops"),
                                  lambda: status(503, {"error": {"message": "busy"}})])
def test_stream_fails_over_before_first_content(ups, step):
    a, b, _ = ups
    a.script(step())
    b.script(ok(["from ", "second"]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused")
        raw = client.chat.completions.with_raw_response.create(model="r", messages=MSG,
                                                                stream=True)
        assert raw.headers["x-humpyard-target"] == "second"
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text == "from second"


def test_stream_broken_after_first_content_does_not_fail_over(ups):
    a, b, _ = ups
    a.script(stream_then_fail(["partial "]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        with httpx.Client(timeout=10) as c, c.stream(
                "POST", gw.url + "/v1/chat/completions",
                json={"model": "r", "messages": MSG, "stream": True}) as resp:
            assert resp.status_code == 200
            got = [line for line in resp.iter_lines() if line]
        assert any("partial" in line for line in got)
        # the stream ends with an error event the SDKs raise on, not a silent cut
        assert '"code": "stream_broken"' in got[-1] or '"code":"stream_broken"' in got[-1]
        assert b.requests == []
        gw.recorded(1)
        [d] = gw.decisions()
        assert d["outcome"] == "stream_broken"


def test_upstream_error_event_after_content_is_recorded_as_broken(ups):
    a, b, _ = ups
    a.script(stream_error("upstream error mid-stream", after=["fine so far "]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused")
        stream = client.chat.completions.create(model="r", messages=MSG, stream=True)
        with pytest.raises(openai.APIError, match="mid-stream"):
            for _ in stream:
                pass
        gw.recorded(1)
        [d] = gw.decisions()
        assert d["outcome"] == "stream_broken" and "mid-stream" in d["error"]


def test_usage_chunk_not_sent_unless_asked(ups):
    a, b, _ = ups
    with running_gateway(two_targets(a.url, b.url)) as gw:
        with httpx.Client(timeout=10) as c:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "r", "messages": MSG, "stream": True})
        assert '"usage"' not in r.text.replace('"usage":null', "")
        assert r.text.rstrip().endswith("data: [DONE]")
        assert a.requests[0].json["stream_options"] == {"include_usage": True}
