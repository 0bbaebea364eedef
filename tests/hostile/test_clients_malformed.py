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
    # llhttp takes these, HTTP/1.1 does not (RFC 9112, 3.2); uvicorn served them
    "no Host": (b"GET /v1/health HTTP/1.1\r\n\r\n", "an HTTP/1.1 request needs a Host header"),
    "two Hosts": (b"GET /v1/health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                  "more than one Host header"),
    "a Host that is no host": (b"GET /v1/health HTTP/1.1\r\nHost: a b\r\n\r\n",
                               "the Host header is not a host[:port]"),
}
FLOOD = 400


def ask(port: int, request: bytes) -> bytes:
    """``request`` on a connection of its own: everything the server sent back."""
    s = connect(port)
    try:
        s.sendall(request)
        return read_answer(s, 10.0)
    finally:
        s.close()


def test_malformed_requests_are_answered_counted_and_sampled(tmp_path: Path) -> None:
    with serving(tmp_path) as (gw, _):
        answers = {}
        for name, (request, _) in CASES.items():
            answers[name] = ask(gw.port, request)
        for _ in range(FLOOD):
            ask(gw.port, CASES["space before colon"][0])
        served = ask(gw.port, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
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
            answers[path] = ask(gw.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        refused = scrape(gw.url, "humpyard_refused_total")
    # counted as a 404 is (a 405 was counted nowhere, and recorded nowhere)
    assert refused == {'{reason="method_not_allowed"}': len(cases)}, refused
    for path, (allowed, _) in cases.items():
        head, _, body = answers[path].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 405 "), (path, answers[path][:300])
        assert json.loads(body)["error"]["code"] == "method_not_allowed"
        allow = re.search(rb"\r\nallow: ([^\r]*)", head, re.IGNORECASE)
        assert allow, head
        assert {m.strip() for m in allow.group(1).decode().split(",")} == allowed, (path, head)


def test_a_path_with_a_trailing_slash_is_named_not_redirected(tmp_path: Path) -> None:
    """``POST /v1/chat/completions/`` got Starlette's 307 to the path without the
    slash, its ``Location`` built from the client's ``Host``, and was recorded
    nowhere: an SDK that does not follow redirects (openai's, anthropic's) raised a
    bare 307. It is now a 404 saying which path was meant, counted as any unknown
    path is (the OpenAI API answers such a path 404 as well)."""
    body = b'{"model":"t","messages":[{"role":"user","content":"hi"}]}'
    with serving(tmp_path) as (gw, up):
        answer = ask(gw.port, b"POST /v1/chat/completions/ HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        page = ask(gw.port, b"GET /ui/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        refused = scrape(gw.url, "humpyard_refused_total")
        assert up.requests == []  # nothing reached the upstream
    head, _, text = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 "), answer[:300]
    assert b"location" not in head.lower()
    error = json.loads(text)["error"]
    assert error["code"] == "not_found"
    assert error["message"] == ("no such path: POST /v1/chat/completions/ "
                                "(did you mean /v1/chat/completions?)"), error
    assert page.startswith(b"HTTP/1.1 404 ") and b"did you mean /ui?" in page, page[:300]
    assert refused == {'{reason="not_found"}': 2}, refused


def test_a_version_other_than_http_1_is_refused_and_1_0_needs_no_host(tmp_path: Path) -> None:
    """llhttp reads ``GET /path HTTP/2.0`` and a bare ``GET /path`` (HTTP/0.9) and
    uvicorn served both as HTTP/1.1. They are a 505 now. An HTTP/1.0 request needs no
    Host header and is served; hosts as clients send them (a name, an IPv4 or IPv6
    literal, a port, an empty value) are all taken."""
    versions = {"HTTP/2.0": b"GET /v1/health HTTP/2.0\r\nHost: x\r\n\r\n",
                "HTTP/0.9": b"GET /v1/health\r\n\r\n"}
    served = {"HTTP/1.0": b"GET /v1/health HTTP/1.0\r\n\r\n",
              **{host: b"GET /v1/health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                 % host.encode()
                 for host in ("gateway.internal", "127.0.0.1:8080", "[::1]:4000",
                              "[fe80::1%25eth0]", "my_host.", "")}}
    with serving(tmp_path) as (gw, _):
        answers = {}
        for name, request in {**versions, **served}.items():
            answers[name] = ask(gw.port, request)
        series = scrape(gw.url, "humpyard_connections_refused_total")
    for name in versions:
        head, _, body = answers[name].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 505 "), (name, answers[name][:300])
        error = json.loads(body)["error"]
        assert error["code"] == "http_version_not_supported"
        assert error["message"] == (f"{name} is not served; this server speaks HTTP/1.1"), error
    for name in served:
        assert answers[name].startswith(b"HTTP/1.1 200 "), (name, answers[name][:300])
    assert series == {'{reason="malformed"}': len(versions)}, series


def test_a_refusal_before_any_route_names_its_decision_and_speaks_the_paths_protocol(
        tmp_path: Path) -> None:
    """A 404 or 405 was recorded under a request id its answer did not carry (every
    other answer carries ``x-humpyard-request-id``); on ``/v1/messages`` it came in
    OpenAI's error shape; and ``GET /v1/models/`` was answered as the model ``''``
    instead of naming ``/v1/models``."""
    import httpx
    with serving(tmp_path) as (gw, _), httpx.Client(base_url=gw.url, timeout=10) as c:
        answers = [c.get("/v1/nothing"), c.put("/v1/chat/completions"),
                   c.put("/v1/messages"), c.post("/v1/messages/batches", json={})]
        slash = c.get("/v1/models/")
        converse = c.post("/model/m/converse", json={})  # an operation not served
        listed = {d["request_id"] for d in c.get(
            "/v1/decisions", params={"limit": 100}).json()["decisions"]}
    for r in answers:
        assert r.headers.get("x-humpyard-request-id") in listed, (r.status_code, r.headers)
    assert [r.status_code for r in answers] == [404, 405, 405, 404]
    assert answers[1].json()["error"]["code"] == "method_not_allowed"
    for r in answers[2:]:  # Anthropic's shape, as every other answer there
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error" \
            if r.status_code == 404 else body["type"] == "error", body
        assert "message" in body["error"]
    assert converse.status_code == 404 and "message" in converse.json()  # Bedrock's shape
    assert converse.headers["x-amzn-errortype"].startswith("ResourceNotFoundException")
    assert slash.status_code == 404
    assert slash.json()["error"]["message"] == (
        "no such path: GET /v1/models/ (did you mean /v1/models?)")
