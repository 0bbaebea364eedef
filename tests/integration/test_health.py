"""Endpoint health end to end: breakers, cold skipping, probes, readiness, re-sends."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest

from humpyard.clock import FakeClock
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.servers import free_port
from tests.support.steps import status

MSG = [{"role": "user", "content": "hi"}]


def cfg(a: str, b: str, *, health: str = "", provider_a: str = "") -> str:
    return f"""
[providers.a]
base_url = "{a}"
{provider_a}
[providers.b]
base_url = "{b}"
[targets.first]
endpoints = [{{ provider = "a", model = "ma" }}]
[targets.second]
endpoints = [{{ provider = "b", model = "mb" }}]
[routes.r]
targets = ["first", "second"]
fallback_on = ["server_error", "unavailable", "connection", "rate_limit", "timeout"]
[health]
failure_threshold = 2
cooldown_secs = 30
{health}
"""


def chat(url: str) -> httpx.Response:
    with httpx.Client(timeout=30) as c:
        return c.post(url + "/v1/chat/completions", json={"model": "r", "messages": MSG})


def endpoint(gw, key: str) -> dict:
    with gw.client() as c:
        eps = c.get("/v1/health").json()["endpoints"]
    return next(e for e in eps if f"{e['provider']}/{e['model']}" == key)


@pytest.fixture
def ups():
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def test_cold_target_is_skipped_then_probed_and_recovers(ups):
    a, b = ups
    clock = FakeClock()
    a.script(status(500), status(500))
    with running_gateway(cfg(a.url, b.url), clock=clock) as gw:
        assert chat(gw.url).headers["x-humpyard-target"] == "second"
        assert chat(gw.url).headers["x-humpyard-target"] == "second"
        e = endpoint(gw, "a/ma")
        assert e["state"] == "cooling_down" and e["cooldown_source"] == "failures"
        assert e["cooldown_remaining_ms"] == 30000
        # while cold, the first target gets no traffic at all
        for _ in range(3):
            assert chat(gw.url).headers["x-humpyard-target"] == "second"
        assert len(a.requests) == 2
        skipped = [d for d in gw.decisions() if d["cold_targets"] == ["first"]]
        assert len(skipped) == 3  # the fake clock stands still, so match them all
        clock.advance(30)
        assert endpoint(gw, "a/ma")["state"] == "probing"
        r = chat(gw.url)  # the probe
        assert r.headers["x-humpyard-target"] == "first"
        assert endpoint(gw, "a/ma")["state"] == "healthy"


def test_every_target_cold_fails_open_soonest_first(ups):
    a, b = ups
    clock = FakeClock()
    with running_gateway(cfg(a.url, b.url), clock=clock) as gw:
        now = clock.now()
        for _ in range(2):
            gw.gw.health.record_failure("a/ma", now)
        clock.advance(5)
        for _ in range(2):
            gw.gw.health.record_failure("b/mb", clock.now())
        # a reopens 5 s before b: it is tried first although both are cold
        r = chat(gw.url)
        assert r.status_code == 200 and r.headers["x-humpyard-target"] == "first"
        assert gw.decisions(limit=1)[0]["health_fail_open"] is True


@pytest.mark.parametrize("code,body,cools", [
    (401, {"error": {"message": "bad key"}}, True),
    (404, {"error": {"message": "no model"}}, True),
    (400, {"error": {"message": "gone", "code": "model_not_found"}}, True),
    (400, {"error": {"message": "bad request"}}, False),
    (422, {"error": {"message": "unprocessable"}}, False),
    (413, {"error": {"message": "too large"}}, False),
])
def test_endpoint_describing_answers_cool_request_errors_do_not(ups, code, body, cools):
    a, b = ups
    a.default = status(code, body)
    with running_gateway(cfg(a.url, b.url), clock=FakeClock()) as gw:
        for _ in range(2):
            chat(gw.url)
        e = endpoint(gw, "a/ma")
    assert (e["state"] == "cooling_down") is cools
    assert e["consecutive_failures"] == (2 if cools else 0)


def test_stated_retry_time_cools_at_once(ups):
    a, b = ups
    a.script(status(429, {"error": {"message": "Please try again in 7.5s"}}))
    with running_gateway(cfg(a.url, b.url), clock=FakeClock()) as gw:
        assert chat(gw.url).headers["x-humpyard-target"] == "second"
        e = endpoint(gw, "a/ma")
        assert e["cooldown_source"] == "retry_after" and e["cooldown_remaining_ms"] == 7500
        att = gw.decisions(limit=1)[0]["attempts"][0]
        assert att["retry_after_ms"] == 7500
        with gw.client() as c:
            assert "humpyard_retry_after_honored_total 1" in c.get("/metrics").text


@pytest.mark.parametrize("stated,honoured_ms,stated_ms", [
    ("Please try again in 0.2s", 1000, 200),      # clamped up to 1 s
    ("Please try again in 100s", 20000, 100000),  # clamped down to max_retry_after_secs
])
def test_the_decision_records_the_retry_time_as_honoured(ups, stated, honoured_ms, stated_ms):
    a, b = ups
    a.script(status(429, {"error": {"message": stated}}))
    text = cfg(a.url, b.url, health="max_retry_after_secs = 20")
    with running_gateway(text, clock=FakeClock()) as gw:
        assert chat(gw.url).headers["x-humpyard-target"] == "second"
        e = endpoint(gw, "a/ma")
        assert e["cooldown_source"] == "retry_after"
        assert e["cooldown_remaining_ms"] == honoured_ms
        attempt = gw.decisions(limit=1)[0]["attempts"][0]
        assert attempt["retry_after_ms"] == honoured_ms
        assert attempt["stated_retry_after_ms"] == stated_ms  # kept beside it


def test_retry_after_header_wins_over_body(ups):
    a, b = ups
    a.script(status(503, {"error": {"message": "try again in 99s"}},
                    headers={"Retry-After": "4"}))
    with running_gateway(cfg(a.url, b.url), clock=FakeClock()) as gw:
        chat(gw.url)
        assert endpoint(gw, "a/ma")["cooldown_remaining_ms"] == 4000


def test_unready_serve_gets_no_inference_and_is_readmitted(ups):
    a, b = ups
    clock = FakeClock()
    a.health_status = 503
    text = cfg(a.url, b.url, provider_a='health_path = "/health"')
    with running_gateway(text, clock=clock) as gw:
        r = chat(gw.url)
        assert r.headers["x-humpyard-target"] == "second"
        assert a.requests_to("/v1/chat/completions") == []
        d = gw.decisions(limit=1)[0]
        assert d["attempts"][0]["skipped"] == "skipped_unavailable"
        assert endpoint(gw, "a/ma")["readiness"] == "not_ready"
        assert endpoint(gw, "a/ma")["consecutive_failures"] == 0
        a.health_status = 200
        clock.advance(2)  # past the negative-answer cache
        assert chat(gw.url).headers["x-humpyard-target"] == "first"
        assert endpoint(gw, "a/ma")["readiness"] == "ready"


def test_refused_connection_names_cause_and_address(ups):
    _, b = ups
    port = free_port()
    text = cfg(f"http://127.0.0.1:{port}/v1", b.url).replace(
        'fallback_on = ["server_error", "unavailable", "connection", "rate_limit", "timeout"]',
        "fallback_on = []")
    with running_gateway(text) as gw:
        r = chat(gw.url)
        assert r.status_code == 502
        assert r.json()["error"]["message"] == f"connect refused 127.0.0.1:{port}"
        att = gw.decisions(limit=1)[0]["attempts"][0]
        assert att["failure_class"] == "connection" and "refused" in att["error"]


def test_never_delivered_request_is_redialled_until_the_serve_starts(caplog):
    port = free_port()
    text = f"""
[providers.late]
base_url = "http://127.0.0.1:{port}/v1"
connect_retry_window_secs = 6
[targets.t]
endpoints = [{{ provider = "late", model = "m" }}]
"""
    late = FakeUpstream(port=port)
    timer = threading.Timer(1.5, late.start)
    caplog.set_level(logging.INFO, logger="humpyard.routability")
    with running_gateway(text) as gw:
        timer.start()
        try:
            started = time.monotonic()
            with httpx.Client(timeout=30) as c:
                r = c.post(gw.url + "/v1/chat/completions", json={"model": "t", "messages": MSG})
            elapsed = time.monotonic() - started
        finally:
            timer.join()
            late.stop()
    assert r.status_code == 200
    assert 1.4 < elapsed < 6.5
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "humpyard.routability"]
    assert len(lines) == 1
    assert lines[0].startswith("humpyard.routability endpoint=late/m attempts=")
    assert "last=ok" in lines[0]
