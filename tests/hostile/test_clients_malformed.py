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
    "length and chunked": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                           "Transfer-Encoding can't be present with Content-Length"),
    # llhttp takes it; uvicorn's reading of its target fails: named, not quoted
    "CONNECT": (b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", "Invalid request target"),
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
    assert b"x:443" not in answers["CONNECT"]
    assert served.startswith(b"HTTP/1.1 200 ")
    assert series == {'{reason="malformed"}': len(CASES) + FLOOD}, series
    warnings = [line for line in log.splitlines() if "not HTTP/1.1" in line]
    assert 1 <= len(warnings) <= 2, warnings  # a burst within 10 s: one line, maybe two
    assert "Invalid HTTP request" not in log and "Traceback" not in log


def test_a_method_a_path_does_not_take_is_told_what_it_takes(tmp_path: Path) -> None:
    """A 405 must say which methods the path takes (RFC 9110, 15.5.6: ``Allow``). The
    gateway's 405 had no ``Allow`` header; and a path served by several routes
    (``/v1/overrides``: GET and POST) would have named only the first."""
    cases = {
        "/v1/chat/completions": ({"POST"}, "GET"),
        "/v1/overrides": ({"GET", "HEAD", "POST"}, "DELETE"),
        "/v1/health": ({"GET", "HEAD"}, "POST"),
    }
    with serving(tmp_path) as (gw, _):
        answers = {}
        for path, (_, method) in cases.items():
            s = connect(gw.port)
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                      "Connection: close\r\n\r\n".encode())
            answers[path] = read_answer(s, 10.0)
            s.close()
    for path, (allowed, _) in cases.items():
        head, _, body = answers[path].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 405 "), (path, answers[path][:300])
        assert json.loads(body)["error"]["code"] == "method_not_allowed"
        allow = re.search(rb"\r\nallow: ([^\r]*)", head, re.IGNORECASE)
        assert allow, head
        assert {m.strip() for m in allow.group(1).decode().split(",")} == allowed, (path, head)
