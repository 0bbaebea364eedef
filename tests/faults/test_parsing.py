"""Answers RFC 9112 says a client must accept, served by the gateway, not refused.

The upstream is a ``RawServer`` sending exactly these bytes (keeping the
connection open afterwards, so a parser that waits for a CRLF it will never
see hangs until the read timeout instead of failing fast).
"""

from __future__ import annotations

import json

import pytest

from tests.faults.harness import drill
from tests.support.rawserver import HOLD, RawServer

BODY = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "parsed"},
     "finish_reason": "stop"}]}).encode()
PAD = b" " * (255 - len(BODY))  # Content-Length: 255


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Note: folded\r\n  over two lines"
    b"\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    b"HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: %d\n\n%s"
    % (len(BODY), BODY),
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 255, 255\r\n\r\n"
    + BODY + PAD,
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 255\r\n"
    b"Content-Length: 255\r\n\r\n" + BODY + PAD,
], ids=["obs-fold", "bare-lf", "content-length-list", "content-length-twice"])
def test_a_valid_but_unusual_answer_is_served(ups, answer):
    _, b, h = ups
    with RawServer([answer, HOLD]) as srv, drill(srv.url + "/v1", b, h) as d:
        sent = d.chat("solo")
        assert sent.status == 200, sent.response.text
        assert sent.response.json()["choices"][0]["message"]["content"] == "parsed"
        assert sent.elapsed < 0.4  # no wait for the read timeout (0.5 s)
