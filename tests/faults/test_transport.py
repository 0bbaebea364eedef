"""Fault drills on the wire: refused, reset, stalled and trickling upstreams.

Every drill runs the real gateway on loopback in front of a scripted upstream
and checks four things: what the client got, what the decision recorded,
what endpoint health shows, and that the bystander route still serves. Every
wait is bounded by provider ``a``'s ``timeout_secs`` (``A_TIMEOUT``), and the
elapsed time is asserted.
"""

from __future__ import annotations

import json

import pytest

from tests.faults.harness import A_TIMEOUT, attempts, drill
from tests.faults.steps import Hold, ResetMidBody, Slowloris, StallAfter
from tests.support.servers import closed_port_url
from tests.support.steps import ok, stream_then_fail

SLACK = 1.0  # scheduling and loopback overhead allowed on top of a timeout


def last_event(lines: list[str]) -> dict:
    assert lines[-1].startswith("data: ")
    return json.loads(lines[-1][len("data: "):])


# -- connection refused ---------------------------------------------------------


def test_refused_fails_over_and_cools_the_endpoint(ups):
    _, b, h = ups
    dead = closed_port_url()
    port = dead.split(":")[2].split("/")[0]
    with drill(dead, b, h) as d:
        sent = d.chat("r")
        assert sent.status == 200
        assert sent.response.headers["x-humpyard-target"] == "second"
        assert sent.elapsed < SLACK
        dec = d.decision(sent.request_id)
        assert dec["outcome"] == "ok" and dec["status"] == 200
        assert attempts(dec) == [("first", "connection"), ("second", None)]
        assert dec["attempts"][0]["error"] == f"connect refused 127.0.0.1:{port}"
        view = d.health("a/ma")
        assert view.state == "cooling_down" and view.cooldown_source == "failures"
        assert d.health("b/mb").state == "healthy"

        alone = d.chat("solo")
        assert alone.status == 502
        assert alone.error_message() == f"connect refused 127.0.0.1:{port}"
        dec = d.decision(alone.request_id)
        assert dec["outcome"] == "failed" and dec["status"] == 502
        assert attempts(dec) == [("first", "connection")]
        d.assert_serving()


def test_refused_resends_stay_inside_the_window(ups):
    _, b, h = ups
    with drill(closed_port_url(), b, h, a_extra="connect_retry_window_secs = 0.6") as d:
        sent = d.chat("solo")
        assert sent.status == 502 and "connect refused" in sent.error_message()
        # the ladder sleeps at most the window in all, each dial is refused at once
        assert sent.elapsed < 0.6 + SLACK
        dec = d.decision(sent.request_id)
        tried = [a for a in dec["attempts"] if not a.get("skipped")]
        assert len(tried) >= 2 and all(a.get("resend") for a in tried[1:])
        assert {a["failure_class"] for a in tried} == {"connection"}
        d.assert_serving()


# -- resets -----------------------------------------------------------------------


def test_reset_mid_body_fails_over_without_a_resend(ups):
    a, b, h = ups
    a.script(ResetMidBody(), ResetMidBody())
    with drill(a, b, h) as d:
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        dec = d.decision(sent.request_id)
        assert attempts(dec) == [("first", "connection"), ("second", None)]
        assert f"127.0.0.1:{a.port}" in dec["attempts"][0]["error"]
        assert d.health("a/ma").state == "cooling_down"

        alone = d.chat("solo")
        assert alone.status == 502
        assert f"127.0.0.1:{a.port}" in alone.error_message()
        assert d.decision(alone.request_id)["outcome"] == "failed"
        # bytes reached the upstream: never re-sent (max_retries = 0)
        assert len(a.requests_to("/v1/chat/completions")) == 2
        d.assert_serving()


@pytest.mark.parametrize("step", [ResetMidBody(("partial ",)), stream_then_fail(["partial "])],
                         ids=["rst", "fin"])
def test_reset_mid_stream_after_content_ends_the_stream_with_an_error(ups, step):
    a, b, h = ups
    a.script(step)
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=True)
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "first"
        assert any("partial" in line for line in sent.lines)
        assert last_event(sent.lines)["error"]["code"] == "stream_broken"
        assert "data: [DONE]" not in sent.lines
        assert b.requests == []  # nothing fails over after the first content
        dec = d.decision(sent.request_id)
        assert dec["outcome"] == "stream_broken" and dec["status"] == 200
        assert dec["error"] and attempts(dec) == [("first", None)]
        # the attempt answered; the break is in the ledger, not the breaker
        assert d.health("a/ma").state == "healthy"
        d.assert_serving()


def test_reset_mid_stream_on_the_anthropic_path_ends_with_an_error_event(ups):
    a, b, h = ups
    a.script(ResetMidBody(("partial ",)))
    with drill(a, b, h) as d:
        body = {"model": "r", "max_tokens": 50, "stream": True,
                "messages": [{"role": "user", "content": "hi"}]}
        with d.http.stream("POST", "/v1/messages", json=body) as resp:
            assert resp.status_code == 200
            lines = [line for line in resp.iter_lines() if line]
        assert "event: error" in lines and "event: message_stop" not in lines
        assert any("partial" in line for line in lines)
        rid = resp.headers["x-humpyard-request-id"]
        assert d.decision(rid)["outcome"] == "stream_broken"
        d.assert_serving()


# -- stalls -----------------------------------------------------------------------


def test_buffered_stall_fails_over_within_the_timeout(ups):
    a, b, h = ups
    a.script(Hold(10), Hold(10))
    with drill(a, b, h) as d:
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        assert A_TIMEOUT * 0.9 < sent.elapsed < A_TIMEOUT + SLACK
        dec = d.decision(sent.request_id)
        assert attempts(dec) == [("first", "timeout"), ("second", None)]
        assert d.health("a/ma").state == "cooling_down"

        alone = d.chat("solo")
        assert alone.status == 504 and alone.elapsed < A_TIMEOUT + SLACK
        assert alone.error_message() == f"timeout after {A_TIMEOUT:g}s 127.0.0.1:{a.port}"
        assert d.decision(alone.request_id)["outcome"] == "failed"
        d.assert_serving()


@pytest.mark.parametrize("step", [Hold(10), StallAfter(content=False, hold=10)],
                         ids=["no-head", "role-chunk-only"])
def test_stream_stalled_before_content_fails_over_within_the_timeout(ups, step):
    a, b, h = ups
    a.script(step)
    b.script(ok(["from ", "second"]))
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=True)
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        assert sent.elapsed < A_TIMEOUT + SLACK
        assert sent.lines[-1] == "data: [DONE]"
        dec = d.decision(sent.request_id)
        assert attempts(dec) == [("first", "timeout"), ("second", None)]
        assert d.health("a/ma").state == "cooling_down"
        d.assert_serving()


def test_stream_stalled_before_content_alone_is_a_504(ups):
    a, b, h = ups
    a.script(StallAfter(content=False, hold=10))
    with drill(a, b, h) as d:
        sent = d.chat("solo", stream=True)
        assert sent.status == 504 and sent.elapsed < A_TIMEOUT + SLACK
        assert "timeout" in sent.error_message()
        assert sent.response.headers["content-type"].startswith("application/json")
        d.assert_serving()


def test_stream_stalled_after_content_ends_within_the_read_timeout(ups):
    a, b, h = ups
    a.script(StallAfter(content=True, hold=10))
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=True)
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "first"
        assert A_TIMEOUT * 0.9 < sent.elapsed < A_TIMEOUT + SLACK
        assert any("partial" in line for line in sent.lines)
        assert last_event(sent.lines)["error"]["code"] == "stream_broken"
        assert b.requests == []
        dec = d.decision(sent.request_id)
        assert dec["outcome"] == "stream_broken"
        assert "read timeout" in dec["error"] and f"127.0.0.1:{a.port}" in dec["error"]
        d.assert_serving()


# -- slowloris --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_slowloris_is_cut_at_the_whole_call_timeout(ups, stream):
    a, b, h = ups
    # one byte every 100 ms never trips a read timeout; only the whole-call one
    a.script(Slowloris(0.1), Slowloris(0.1))
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=stream)
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        assert A_TIMEOUT * 0.9 < sent.elapsed < A_TIMEOUT + SLACK
        dec = d.decision(sent.request_id)
        assert attempts(dec) == [("first", "timeout"), ("second", None)]
        assert d.health("a/ma").state == "cooling_down"

        alone = d.chat("solo", stream=stream)
        assert alone.status == 504 and alone.elapsed < A_TIMEOUT + SLACK
        assert "timeout" in alone.error_message()
        d.assert_serving()
