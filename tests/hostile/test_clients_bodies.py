"""A request body the gateway refuses as too large gets one answer, and the
connection goes on.

Seen by running ``humpyard serve``: a chunked body past ``max_body_bytes`` was
answered 413, and then, on the same connection, 431 "request head: more than
65536 bytes". Once the 413 was sent, the connection guard took the rest of the
body, still arriving, for the next request's head, measured a large read of it
against ``max_header_bytes`` and answered that too: two answers to one request,
the second of which a keep-alive client would read as the answer to its next.
The same happened to a body whose ``Content-Length`` alone was over the limit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.durability.process import ServeProcess
from tests.hostile.clients_support import connect, read_answer, scrape, write_config
from tests.support.fake_upstream import FakeUpstream

LIMIT = 200_000
OVER = 1_000_000
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _post(headers: str, body: bytes) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\n{headers}\r\n").encode() + body


def _chunked(payload: bytes, size: int = 100_000) -> bytes:
    pieces = [payload[i:i + size] for i in range(0, len(payload), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


def test_a_body_over_the_limit_gets_one_answer_and_the_connection_goes_on(
        tmp_path: Path) -> None:
    filler = json.dumps({"model": "t", "messages": [
        {"role": "user", "content": "a" * OVER}]}).encode()
    cases = {
        "content-length": _post(f"Content-Length: {len(filler)}\r\n", filler),
        "chunked": _post("Transfer-Encoding: chunked\r\n", _chunked(filler)),
    }
    answers = {}
    with FakeUpstream() as up:
        cfg = write_config(tmp_path, up.url)
        cfg.write_text(f"max_body_bytes = {LIMIT}\n" + cfg.read_text())
        with ServeProcess(cfg, tmp_path / "serve.log") as gw:
            for name, request in cases.items():
                s = connect(gw.port)
                s.sendall(request + HEALTH)
                answers[name] = read_answer(s, 10.0)
                s.close()
            series = scrape(gw.url, "humpyard_connections_refused_total")
    for name, answer in answers.items():
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
        assert statuses == [b"413", b"200"], (name, answer[:600])
        assert b"payload_too_large" in answer, name
    assert '{reason="headers_too_large"}' not in series, series
