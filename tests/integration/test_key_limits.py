"""Per-key limits (rpm_limit, tpm_limit, max_parallel_requests) — over HTTP, with the SDKs.

Each limit refuses exactly at its bound with 429 at once, ``retry-after`` and the
rate-limit headers the official clients read (OpenAI's ``x-ratelimit-*``,
Anthropic's ``anthropic-ratelimit-*`` and ``rate_limit_error`` on /v1/messages);
a limited key's successful answers carry the headers too. Windows are minutes of
the gateway's injected clock (a ``FakeClock`` here: no real waiting).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx
import openai
import pytest

from humpyard.clock import FakeClock
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Delay, ok

ENV = {"DEV": "dev-secret", "ADMIN": "admin-secret", "OTHER": "other-secret"}
MSG = [{"role": "user", "content": "hi"}]
START = 1_800_000_000.0  # a whole minute: windows start here


def cfg(up: str, limits: str) -> str:
    return f"""
[providers.up]
base_url = "{up}"
[targets.t]
endpoints = [{{ provider = "up", model = "m" }}]
[routes.r]
targets = ["t"]
[health]
failure_threshold = 0
[keys.dev]
key_env = "DEV"
{limits}
[keys.other]
key_env = "OTHER"
[keys.admin]
key_env = "ADMIN"
admin = true
"""


def oai(gw: Running, key: str = "dev-secret") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=30)


def chat(gw: Running, key: str = "dev-secret") -> httpx.Response:
    with httpx.Client(base_url=gw.url, timeout=30,
                      headers={"authorization": f"Bearer {key}"}) as c:
        return c.post("/v1/chat/completions", json={"model": "r", "messages": MSG})


def explain_limits(gw: Running) -> dict[str, Any]:
    with httpx.Client(base_url=gw.url, timeout=30,
                      headers={"authorization": "Bearer dev-secret"}) as c:
        r = c.post("/v1/route/explain", json={"model": "r"})
        assert r.status_code == 200, r.text
        return r.json()["limits"]  # type: ignore[no-any-return]


def test_rpm_limit_refuses_the_n_plus_first_with_openai_headers():
    clock = FakeClock(START + 10)
    with FakeUpstream(default=ok("answer")) as up, \
            running_gateway(cfg(up.url, "rpm_limit = 3"), env=ENV, clock=clock,
                            admin_key="admin-secret") as gw:
        client = oai(gw)
        for left in (2, 1, 0):
            raw = client.chat.completions.with_raw_response.create(model="r", messages=MSG)
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-remaining-requests"] == str(left)
            assert raw.headers["x-ratelimit-reset-requests"] == "50s"
            assert "x-ratelimit-limit-tokens" not in raw.headers  # no tpm_limit set
        with pytest.raises(openai.RateLimitError) as e:
            client.chat.completions.create(model="r", messages=MSG)
        h = e.value.response.headers
        assert e.value.status_code == 429 and e.value.code == "rate_limit_exceeded"
        assert h["retry-after"] == "50" and h["x-ratelimit-remaining-requests"] == "0"
        assert "rpm_limit is 3" in e.value.message
        assert len(up.requests_to("/v1/chat/completions")) == 3  # refused before the upstream
        assert chat(gw, "other-secret").status_code == 200  # another key is not limited
        assert explain_limits(gw)["requests_remaining"] == 0
        clock.advance(50)  # the next minute
        assert chat(gw).status_code == 200
        gw.recorded(6)
        refused = [d for d in gw.decisions() if d["status"] == 429]
        assert [d.get("limit") for d in refused] == ["rpm_limit"]
        assert refused[0]["outcome"] == "rate_limit_exceeded"


def tokens_left(gw: Running, expected: int) -> None:
    """Wait until the answered requests have settled (their records close after the
    answer is out) to ``expected`` tokens left this minute."""
    deadline = time.monotonic() + 10
    while (left := explain_limits(gw)["tokens_remaining"]) != expected:
        assert time.monotonic() < deadline, left
        time.sleep(0.01)


def test_tpm_limit_counts_the_used_tokens():
    clock = FakeClock(START)
    usage = {"prompt_tokens": 30, "completion_tokens": 30}  # 60 tokens an answer
    with FakeUpstream(default=ok("answer", usage=usage)) as up, \
            running_gateway(cfg(up.url, "tpm_limit = 125"), env=ENV, clock=clock) as gw:
        client = oai(gw)
        first = client.chat.completions.with_raw_response.create(model="r", messages=MSG)
        assert first.headers["x-ratelimit-limit-tokens"] == "125"
        estimate = 125 - int(first.headers["x-ratelimit-remaining-tokens"])
        assert 0 < estimate < 60  # the prompt's estimate is taken at admission
        tokens_left(gw, 65)  # and settled to the 60 used
        client.chat.completions.create(model="r", messages=MSG)
        tokens_left(gw, 5)
        with pytest.raises(openai.RateLimitError) as e:  # 120 + the estimate > 125
            client.chat.completions.create(model="r", messages=MSG)
        assert e.value.response.headers["x-ratelimit-remaining-tokens"] == "5"
        assert e.value.response.headers["x-ratelimit-reset-tokens"] == "1m0s"
        assert "tpm_limit is 125" in e.value.message
        assert len(up.requests_to("/v1/chat/completions")) == 2
        clock.advance(60)
        client.chat.completions.create(model="r", messages=MSG)


def test_max_parallel_requests_refuses_at_once_while_two_are_in_flight():
    with FakeUpstream(default=Delay(1.0, ok("slow"))) as up, \
            running_gateway(cfg(up.url, "max_parallel_requests = 2"), env=ENV) as gw:
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(chat(gw).status_code))
                   for _ in range(2)]
        for t in threads:
            t.start()
        assert up.wait_for_requests(2, timeout=10)
        assert explain_limits(gw)["in_flight"] == 2
        r = chat(gw)
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        assert r.headers["retry-after"] == "1"
        assert r.elapsed.total_seconds() < 0.9  # refused at once, not queued
        for t in threads:
            t.join(10)
        assert results == [200, 200]
        assert chat(gw).status_code == 200  # both slots are back


def test_anthropic_clients_get_anthropic_names_and_error_shape():
    clock = FakeClock(START + 30)
    with FakeUpstream(default=ok("answer")) as up, \
            running_gateway(cfg(up.url, "rpm_limit = 1\ntpm_limit = 100000"), env=ENV,
                            clock=clock) as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="dev-secret", max_retries=0)
        raw = client.messages.with_raw_response.create(model="r", max_tokens=10,
                                                        messages=MSG)
        reset = datetime.fromtimestamp(START + 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "1"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert raw.headers["anthropic-ratelimit-requests-reset"] == reset
        assert raw.headers["anthropic-ratelimit-tokens-limit"] == "100000"
        assert raw.headers["anthropic-ratelimit-tokens-reset"] == reset
        assert "x-ratelimit-limit-requests" not in raw.headers
        with pytest.raises(anthropic.RateLimitError) as e:
            client.messages.create(model="r", max_tokens=10, messages=MSG)
        assert e.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert e.value.response.headers["retry-after"] == "30"
        assert e.value.response.headers["anthropic-ratelimit-requests-remaining"] == "0"


def test_streams_and_the_responses_api_carry_the_headers_too():
    clock = FakeClock(START)
    with FakeUpstream(default=ok("answer")) as up, \
            running_gateway(cfg(up.url, "rpm_limit = 2"), env=ENV, clock=clock) as gw:
        client = oai(gw)
        with client.chat.completions.with_streaming_response.create(
                model="r", messages=MSG, stream=True) as stream:
            assert stream.headers["x-ratelimit-remaining-requests"] == "1"
            assert "".join(c.choices[0].delta.content or "" for c in stream.parse()
                           if c.choices) == "answer"
        raw = client.responses.with_raw_response.create(model="r", input="hi")
        assert raw.headers["x-ratelimit-remaining-requests"] == "0"
        with pytest.raises(openai.RateLimitError) as e:
            client.responses.create(model="r", input="hi")
        assert e.value.response.headers["x-ratelimit-limit-requests"] == "2"
