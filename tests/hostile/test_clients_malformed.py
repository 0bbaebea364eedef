"""Bytes that are not HTTP/1.1 are refused in the gateway's shape, counted, and
logged sparingly.

Seen by running ``humpyard serve``: every malformed request (a space before a
header's colon, a NUL in a value, a lowercase method, an HTTP/2 preface) got
uvicorn's plain-text 400 "Invalid HTTP request received.", was counted nowhere,
and wrote one WARNING line: 500 of them without a key, 500 lines in 0.2 s. Now
each is a JSON 400 ``bad_request`` naming what the parser found, counted in
``humpyard_connections_refused_total{reason="malformed"}``, and logged at most
once every 10 s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.hostile.clients_support import connect, read_answer, scrape, serving

CASES = {
    "space before colon": (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A : a\r\n\r\n",
                           "Invalid header token"),
    "NUL in a value": (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
                       "Invalid header value char"),
    "lowercase method": (b"post /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
                         "Invalid method"),
    "HTTP/2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "PRI"),
}
FLOOD = 400


def test_malformed_requests_are_answered_counted_and_sampled(tmp_path: Path) -> None:
    with serving(tmp_path) as (gw, _):
        answers = {}
        for name, (request, _) in CASES.items():
            s = connect(gw.port)
            s.sendall(request)
            answers[name] = read_answer(s, 10.0)
            s.close()
        for _ in range(FLOOD):
            s = connect(gw.port)
            s.sendall(CASES["space before colon"][0])
            read_answer(s, 10.0)
            s.close()
        health = connect(gw.port)
        health.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        served = read_answer(health, 10.0)
        health.close()
        series = scrape(gw.url, "humpyard_connections_refused_total")
        log = (tmp_path / "serve.log").read_text()

    for name, (_, reason) in CASES.items():
        answer = answers[name]
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"400"], (name, answer[:400])
        assert b"\r\nconnection: close\r\n" in answer
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == "bad_request", error
        assert "not valid HTTP/1.1" in error["message"] and reason in error["message"], error
    assert served.startswith(b"HTTP/1.1 200 ")
    assert series == {'{reason="malformed"}': len(CASES) + FLOOD}, series
    warnings = [line for line in log.splitlines() if "not HTTP/1.1" in line]
    assert 1 <= len(warnings) <= 2, warnings  # a burst within 10 s: one line, maybe two
    assert "Invalid HTTP request" not in log
