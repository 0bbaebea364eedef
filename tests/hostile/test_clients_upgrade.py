"""A request that offers to change protocol (``Upgrade``) is served as HTTP/1.1.

Seen by running ``humpyard serve``: ``curl --http2 -d @body.json http://...``
sends ``Connection: Upgrade, HTTP2-Settings`` and ``Upgrade: h2c`` with its POST
(other HTTP/2 clients offer ``h2c`` on plain http too). The HTTP parser took
the request as ending at its head: the body was never read, the gateway
answered 400 "request body is empty", and two WARNING lines per request went
to the log. A request pipelined after an upgrade offer in the same write was
never answered. A server may ignore an ``Upgrade`` (RFC 9110, 7.8): the
gateway speaks HTTP/1.1 and nothing else, so it now reads the body and the
requests after it as HTTP/1.1, and logs nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tests.hostile.clients_support import connect, read_answer, serving

BODY = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi"}]}).encode()
OFFER = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\n"
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _post(framing: bytes, body: bytes, offer: bytes = OFFER) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n" + offer + framing + b"\r\n" + body)


def _chunked(body: bytes) -> bytes:
    half = len(body) // 2
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:])) + \
        b"0\r\n\r\n"


def test_an_upgrade_offer_is_ignored_and_the_request_served(tmp_path: Path) -> None:
    cases = {
        "length": _post(b"Content-Length: %d\r\n" % len(BODY), BODY) + HEALTH,
        "chunked": _post(b"Transfer-Encoding: chunked\r\n", _chunked(BODY)) + HEALTH,
        "websocket": _post(b"Content-Length: %d\r\n" % len(BODY), BODY,
                           b"Connection: upgrade\r\nUpgrade: websocket\r\n") + HEALTH,
        "no body": (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + OFFER + b"\r\n") + HEALTH,
        # an empty body, read at once: it waited for body_timeout_secs
        "empty": _post(b"Content-Length: 0\r\n", b"") + HEALTH,
    }
    with serving(tmp_path) as (gw, up):
        answers = {}
        for name, request in cases.items():
            s = connect(gw.port)
            s.sendall(request)
            answers[name] = read_answer(s, 10.0)
            s.close()
        # The body in reads of its own after the head: the head asks for a 100 Continue,
        # which goes out once the head is parsed and the request waits for its body.
        s = connect(gw.port)
        s.sendall(_post(b"Expect: 100-continue\r\nContent-Length: %d\r\n" % len(BODY), b""))
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        for i in range(0, len(BODY), 7):
            s.sendall(BODY[i:i + 7])
        s.sendall(HEALTH)
        answers["pieces"] = read_answer(s, 10.0)
        s.close()
        calls = len(up.requests)
        log = (tmp_path / "serve.log").read_text()

    for name, answer in answers.items():
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)  # (the 100 was read)
        first = b"400" if name == "empty" else b"200"
        assert statuses == [first, b"200"], (name, answer[:600])
    assert b"request body is empty" in answers["empty"]
    assert calls == 4  # every POST reached the upstream with its body
    assert [r.json["messages"] for r in up.requests] == [
        [{"role": "user", "content": "hi"}]] * 4
    assert "upgrade" not in log.lower(), log[-2000:]


def test_curl_offering_http2_gets_its_answer(tmp_path: Path) -> None:
    """The real client: ``curl --http2`` on a plain-http URL, a POST with a body."""
    curl = shutil.which("curl")
    assert curl, "curl is installed by the test setup"
    with serving(tmp_path) as (gw, up):
        run = subprocess.run(
            [curl, "-sS", "-v", "--http2", "-H", "content-type: application/json",
             "--data-binary", BODY.decode(), f"{gw.url}/v1/chat/completions"],
            capture_output=True, text=True, timeout=30, check=False)
    assert "> Upgrade: h2c" in run.stderr  # what makes this case
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["choices"][0]["message"]["content"], run.stdout
    assert len(up.requests) == 1


def test_many_offers_in_one_write_are_each_served(tmp_path: Path) -> None:
    """3,000 pipelined requests, each with an upgrade offer, in one write: each offer
    read on the rest of the read one level deeper, past Python's recursion limit, so
    the connection was reset with none answered and the log took a 7,911-line trace.
    Every one is answered now, and the log holds no trace."""
    offer = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + OFFER + b"\r\n"
    n = 3000
    with serving(tmp_path) as (gw, _):
        s = connect(gw.port)
        s.sendall(offer * n + HEALTH)
        answer = read_answer(s, 60.0)
        s.close()
        log = (tmp_path / "serve.log").read_text()
    assert len(re.findall(rb"HTTP/1\.1 200 ", answer)) == n + 1
    assert "Traceback" not in log, log[-2000:]
