"""Fault drills on what a 200 carries: truncated JSON, invalid SSE, error objects.

A 200 that is not a usable answer is a failure of class ``server_error``
(502): it fails over like a 5xx, cools the endpoint, and when nothing else
answers the client gets a 502 that says what was wrong, never the broken body.
"""

from __future__ import annotations

import json

import pytest

from tests.faults.harness import attempts, drill
from tests.faults.steps import (
    Raw200,
    error_object_200,
    garbage_after_content,
    invalid_sse,
    truncated_json,
)
from tests.support.steps import stream_error


def served_by_second(d, step_count: int, sent) -> dict:
    assert sent.status == 200, sent.response.text
    assert sent.response.headers["x-humpyard-target"] == "second"
    dec = d.decision(sent.request_id)
    assert dec["outcome"] == "ok"
    assert attempts(dec) == [("first", "server_error"), ("second", None)]
    assert d.health("a/ma").state == "cooling_down"
    return dec


def test_truncated_json_on_a_200(ups):
    a, b, h = ups
    a.script(truncated_json(), truncated_json())
    with drill(a, b, h) as d:
        dec = served_by_second(d, 1, d.chat("r"))
        assert dec["attempts"][0]["error"] == (
            "upstream answered 200 with a body that is not a chat completion")
        alone = d.chat("solo")
        assert alone.status == 502
        assert alone.error_message() == (
            "upstream answered 200 with a body that is not a chat completion")
        d.assert_serving()


@pytest.mark.parametrize("body", [b"", b"null", b"[]", b'"text"', b"<html>oops</html>",
                                  b'{"id": "x", "object": "chat.completion"}'],
                         ids=["empty", "null", "array", "string", "html", "no-choices"])
def test_other_non_completions_on_a_200(ups, body):
    a, b, h = ups
    a.script(Raw200(body))
    with drill(a, b, h) as d:
        sent = d.chat("solo")
        assert sent.status == 502
        assert sent.error_message() == (
            "upstream answered 200 with a body that is not a chat completion")
        d.assert_serving()


def test_invalid_sse_before_content_fails_over(ups):
    a, b, h = ups
    a.script(invalid_sse(), invalid_sse())
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=True)
        assert sent.lines[-1] == "data: [DONE]"
        dec = served_by_second(d, 1, sent)
        assert "invalid stream event" in dec["attempts"][0]["error"]
        alone = d.chat("solo", stream=True)
        assert alone.status == 502 and "invalid stream event" in alone.error_message()
        assert alone.response.headers["content-type"].startswith("application/json")
        d.assert_serving()


def test_invalid_sse_after_content_is_passed_on_and_the_stream_ends(ups):
    a, b, h = ups
    a.script(garbage_after_content())
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=True)
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "first"
        assert any("fine" in line for line in sent.lines)
        assert sent.lines[-1] == "data: [DONE]"
        assert b.requests == []
        assert d.decision(sent.request_id)["outcome"] == "ok"
        d.assert_serving()


def test_error_object_on_a_buffered_200(ups):
    a, b, h = ups
    a.script(error_object_200("model overloaded"), error_object_200("model overloaded"))
    with drill(a, b, h) as d:
        dec = served_by_second(d, 1, d.chat("r"))
        assert dec["attempts"][0]["error"] == "model overloaded"
        alone = d.chat("solo")
        assert alone.status == 502 and alone.error_message() == "model overloaded"
        d.assert_serving()


def test_error_object_answering_a_stream_request(ups):
    # a 200 application/json error body where an event stream was asked for
    a, b, h = ups
    a.script(error_object_200("model overloaded"), error_object_200("model overloaded"))
    with drill(a, b, h) as d:
        dec = served_by_second(d, 1, d.chat("r", stream=True))
        assert dec["attempts"][0]["error"] == "model overloaded"
        alone = d.chat("solo", stream=True)
        assert alone.status == 502 and alone.error_message() == "model overloaded"
        d.assert_serving()


def test_error_event_before_content_fails_over(ups):
    a, b, h = ups
    a.script(stream_error("overloaded"), stream_error("overloaded"))
    with drill(a, b, h) as d:
        dec = served_by_second(d, 1, d.chat("r", stream=True))
        assert dec["attempts"][0]["error"] == "upstream stream error: overloaded"
        alone = d.chat("solo", stream=True)
        assert alone.status == 502
        assert alone.error_message() == "upstream stream error: overloaded"
        d.assert_serving()


def test_error_event_after_content_ends_the_stream(ups):
    a, b, h = ups
    a.script(stream_error("went away", after=["partial "]))
    with drill(a, b, h) as d:
        sent = d.chat("r", stream=True)
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "first"
        last = json.loads(sent.lines[-1].removeprefix("data: "))
        assert last["error"]["message"] == "upstream stream error: went away"
        assert last["error"]["code"] == "stream_broken"
        dec = d.decision(sent.request_id)
        assert dec["outcome"] == "stream_broken"
        assert dec["error"] == "upstream stream error: went away"
        assert b.requests == []
        d.assert_serving()
