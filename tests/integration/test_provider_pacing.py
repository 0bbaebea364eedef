"""Provider pacing — over HTTP: route away from an endpoint about to refuse.

An upstream that says it has nothing left (``x-ratelimit-remaining-requests: 0``,
``anthropic-ratelimit-tokens-remaining: 0``) is not called again until its reset:
the next request goes to the next target at once, and the decision and explain
list the paced target. A provider without such headers can be given
``rpm_limit``/``tpm_limit``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.health.pacing import exhausted_until
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway, two_targets
from tests.support.steps import ok

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
NOW = 1_800_000_000.0


def send(gw: Running) -> httpx.Response:
    with gw.client() as c:
        r = c.post(CHAT, json={"model": "r", "messages": MSG})
        assert r.status_code == 200, r.text
        return r


def explain(gw: Running) -> dict[str, Any]:
    with gw.client() as c:
        return c.post("/v1/route/explain", json={"model": "r"}).json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("headers", [
    {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s"},
    {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "19.5s"},
    {"anthropic-ratelimit-requests-remaining": "0",
     "anthropic-ratelimit-requests-reset": "2027-01-15T08:00:20Z"},
    {"x-ratelimit-remaining-requests": "0", "retry-after": "20"},
])
def test_an_upstream_with_nothing_left_is_skipped_until_its_reset(headers):
    clock = FakeClock(NOW)  # 2027-01-15T08:00:00Z
    with FakeUpstream() as a, FakeUpstream(default=ok("b")) as b, \
            running_gateway(two_targets(a.url, b.url), clock=clock) as gw:
        a.script(ok("a", headers=headers), ok("a again"))
        assert send(gw).headers["x-humpyard-target"] == "first"
        assert explain(gw)["paced_targets"] == [{"target": "first",
                                                 "reason": "upstream_rate_limited"}]
        assert send(gw).headers["x-humpyard-target"] == "second"  # a is not called
        assert len(a.requests_to(CHAT)) == 1
        clock.advance(21)  # past its reset
        assert send(gw).headers["x-humpyard-target"] == "first"
        gw.recorded(3)
        paced = [d.get("paced_targets") for d in gw.decisions()]
        assert paced.count(["first"]) == 1


def test_a_paced_target_is_still_tried_when_nothing_else_is_left():
    clock = FakeClock(NOW)
    text = two_targets("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    with FakeUpstream() as a, running_gateway(
            text.replace('targets = ["first", "second"]', 'targets = ["first"]')
            .replace("http://127.0.0.1:9/v1", a.url, 1), clock=clock) as gw:
        a.script(ok("a", headers={"x-ratelimit-remaining-requests": "0"}), ok("a again"))
        send(gw)
        assert send(gw).headers["x-humpyard-target"] == "first"  # pacing never refuses


def test_provider_rpm_limit_paces_a_provider_that_sends_no_headers():
    clock = FakeClock(NOW + 5)
    with FakeUpstream(default=ok("a")) as a, FakeUpstream(default=ok("b")) as b:
        text = two_targets(a.url, b.url).replace(
            f'[providers.a]\nbase_url = "{a.url}"',
            f'[providers.a]\nbase_url = "{a.url}"\nrpm_limit = 2')
        with running_gateway(text, clock=clock) as gw:
            assert [send(gw).headers["x-humpyard-target"] for _ in range(3)] == [
                "first", "first", "second"]
            clock.advance(55)  # the provider's next minute
            assert send(gw).headers["x-humpyard-target"] == "first"


def test_provider_tpm_limit_counts_the_tokens_answers_used():
    clock = FakeClock(NOW + 5)
    usage = {"prompt_tokens": 30, "completion_tokens": 30}
    with FakeUpstream(default=ok("a", usage=usage)) as a, FakeUpstream(default=ok("b")) as b:
        text = two_targets(a.url, b.url).replace(
            f'[providers.a]\nbase_url = "{a.url}"',
            f'[providers.a]\nbase_url = "{a.url}"\ntpm_limit = 100')
        with running_gateway(text, clock=clock) as gw:
            assert send(gw).headers["x-humpyard-target"] == "first"
            gw.recorded(1)  # 60 tokens counted when its record closed
            assert send(gw).headers["x-humpyard-target"] == "first"
            gw.recorded(2)  # 120 ≥ 100: paced until the minute ends
            assert send(gw).headers["x-humpyard-target"] == "second"


def test_reading_the_headers():
    assert exhausted_until({"x-ratelimit-remaining-requests": "5"}, NOW) is None
    assert exhausted_until({}, NOW) is None
    assert exhausted_until({"x-ratelimit-remaining-requests": "0",
                            "x-ratelimit-reset-requests": "6m0s"}, NOW) == NOW + 360
    assert exhausted_until({"x-ratelimit-remaining-tokens": "0",
                            "x-ratelimit-reset-tokens": "20ms"}, NOW) == pytest.approx(NOW + 0.02)
    assert exhausted_until({"anthropic-ratelimit-output-tokens-remaining": "0",
                            "anthropic-ratelimit-output-tokens-reset":
                                "2027-01-15T08:01:00+00:00"}, NOW) == NOW + 60
    assert exhausted_until({"x-ratelimit-remaining-requests": "0"}, NOW) == NOW + 1
    assert exhausted_until({"x-ratelimit-remaining-requests": "0",
                            "x-ratelimit-reset-requests": "garbage"}, NOW) == NOW + 1
    assert exhausted_until({"x-ratelimit-remaining-requests": "0",
                            "x-ratelimit-reset-requests": "99999h"}, NOW) == NOW + 3600
