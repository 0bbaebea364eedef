"""Bedrock's invoke-with-response-stream on the stream function as Lambda runs it
(``run.sh`` → uvicorn → ``main:create_app``; ``test_lambda_stream.py`` plays the Web
Adapter): the event-stream messages leave as the upstream produces them, and the
decision is in DynamoDB before the last byte."""

from __future__ import annotations

import base64
import json
import time

import httpx
from botocore.eventstream import EventStreamBuffer
from test_lambda_stream import StreamFunction, stream_function  # noqa: F401 - the fixture

from tests.support import FakeUpstream, ok

BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}]}


def test_a_bedrock_event_stream_arrives_as_produced_and_is_recorded_before_its_end(
        stream_function: tuple[StreamFunction, FakeUpstream]) -> None:  # noqa: F811
    fn, primary = stream_function
    primary.script(ok(["Hel", "lo ", "there"], chunk_delay=0.4))
    arrivals: list[tuple[float, str]] = []
    buf = EventStreamBuffer()
    started = time.monotonic()
    with httpx.Client(timeout=20) as client, client.stream(
            "POST", fn.url + "/model/auto/invoke-with-response-stream", json=BODY) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/vnd.amazon.eventstream"
        rid = resp.headers["x-humpyard-request-id"]
        for data in resp.iter_bytes():
            buf.add_data(data)
            for message in buf:
                event = json.loads(base64.b64decode(json.loads(message.payload)["bytes"]))
                if event["type"] == "content_block_delta":
                    arrivals.append((time.monotonic() - started, event["delta"]["text"]))
        decision = fn.store.get_decision(rid)
    assert [d for _, d in arrivals] == ["Hel", "lo ", "there"]
    assert arrivals[-1][0] - arrivals[0][0] >= 0.6  # relayed as produced, not buffered
    assert decision is not None and decision["outcome"] == "ok"
    assert decision["protocol"] == "bedrock"
