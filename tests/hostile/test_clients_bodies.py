"""Request bodies the gateway refuses or must undo.

A body too large gets one answer, and the connection goes on.

Seen by running ``humpyard serve``: a chunked body past ``max_body_bytes`` was
answered 413, and then, on the same connection, 431 "request head: more than
65536 bytes". Once the 413 was sent, the connection guard took the rest of the
body, still arriving, for the next request's head, measured a large read of it
against ``max_header_bytes`` and answered that too: two answers to one request,
the second of which a keep-alive client would read as the answer to its next.
The same happened to a body whose ``Content-Length`` alone was over the limit.

A compressed body is undone within the limit, or refused by name.
"""

from __future__ import annotations

import gzip
import http.client
import json
import re
import sqlite3
import time
import zlib
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.hostile.clients_support import connect, read_answer, scrape, serving, write_config
from tests.support.fake_upstream import FakeUpstream
from tests.support.probe import peak_rss_mb, rss_mb

LIMIT = 200_000
OVER = 1_000_000
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _post(headers: str, body: bytes) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\n{headers}\r\n").encode() + body


def _chunked(payload: bytes, size: int = 100_000) -> bytes:
    pieces = [payload[i:i + size] for i in range(0, len(payload), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


def _each_then_health(tmp_path: Path, up: FakeUpstream, cases: dict[str, bytes]
                      ) -> tuple[dict[str, bytes], str, int]:
    """Each raw request, then ``GET /v1/health`` on its connection, against a ``serve``
    with ``max_body_bytes = LIMIT``: what each connection got, the refused-connections
    series, and how many calls reached the upstream."""
    answers = {}
    cfg = write_config(tmp_path, up.url)
    cfg.write_text(f"max_body_bytes = {LIMIT}\n" + cfg.read_text())
    with ServeProcess(cfg, tmp_path / "serve.log") as gw:
        for name, request in cases.items():
            s = connect(gw.port)
            s.sendall(request + HEALTH)
            answers[name] = read_answer(s, 10.0)
            s.close()
        series = scrape(gw.url, "humpyard_connections_refused_total")
    return answers, series, len(up.requests)


def test_a_body_over_the_limit_gets_one_answer_and_the_connection_goes_on(
        tmp_path: Path) -> None:
    filler = json.dumps({"model": "t", "messages": [
        {"role": "user", "content": "a" * OVER}]}).encode()
    cases = {
        "content-length": _post(f"Content-Length: {len(filler)}\r\n", filler),
        "chunked": _post("Transfer-Encoding: chunked\r\n", _chunked(filler)),
    }
    with FakeUpstream() as up:
        answers, series, _ = _each_then_health(tmp_path, up, cases)
    for name, answer in answers.items():
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
        assert statuses == [b"413", b"200"], (name, answer[:600])
        assert b"payload_too_large" in answer, name
    assert '{reason="headers_too_large"}' not in series, series


def test_a_compressed_body_is_undone_within_the_limit_or_refused_by_name(
        tmp_path: Path) -> None:
    """``Content-Encoding`` on a request: a gzip body was read as JSON as it was, a
    400 "request body is not valid UTF-8 (byte 1)". gzip and deflate bodies are now
    undone, a bounded step at a time: one that inflates past ``max_body_bytes`` (a
    256 MiB bomb in 256 KB) is a 413 without the gateway holding more than the limit;
    a body that does not decode is a 400, and a coding the gateway does not undo is a
    415 that says which it does."""
    body = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi"}]}
                      ).encode()
    squeeze = zlib.compressobj(9)
    bomb = b"".join(squeeze.compress(bytes(1 << 20)) for _ in range(256)) + squeeze.flush()
    assert len(bomb) < 300_000
    with serving(tmp_path) as (gw, up):
        with httpx.Client(base_url=gw.url, timeout=30) as client:
            def post(data: bytes, coding: str, path: str = "/v1/chat/completions"
                     ) -> httpx.Response:
                return client.post(path, content=data, headers={
                    "content-type": "application/json", "content-encoding": coding})
            gzipped = post(gzip.compress(body), "gzip")
            deflated = post(zlib.compress(body), "deflate")
            raw_deflated = post(zlib.compress(body, wbits=-15), "deflate")
            messages = post(gzip.compress(json.dumps({
                "model": "t", "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}]}).encode()), "gzip",
                "/v1/messages")
            before = rss_mb(gw.pid)
            bombed = post(bomb, "deflate")
            grew = peak_rss_mb(gw.pid) - before
            broken = post(gzip.compress(body)[:-12] + b"x" * 12, "gzip")
            zstd = post(body, "zstd")
            served_after = post(body, "identity")
        calls = len(up.requests)
    for answer in (gzipped, deflated, raw_deflated, messages, served_after):
        assert answer.status_code == 200, answer.text
    assert calls == 5
    assert bombed.status_code == 413, bombed.text
    assert "decoded" in bombed.json()["error"]["message"]
    assert grew < 100, f"the gateway grew {grew:.0f} MB on a body over a 32 MiB limit"
    assert broken.status_code == 400, broken.text
    assert "content-encoding" in broken.json()["error"]["message"]
    assert zstd.status_code == 415, zstd.text
    assert zstd.headers["accept-encoding"] == "gzip, deflate"
    assert zstd.json()["error"]["code"] == "unsupported_encoding"


def test_a_gzip_body_in_several_members_is_undone_whole(tmp_path: Path) -> None:
    """A gzip body is a series of members (RFC 1952; ``cat a.gz b.gz``, a compressor
    that flushes a member per part). Only the first was undone: the rest of the body
    was dropped, and the JSON cut short was a 400. Every member is undone now, up to
    64; more is a 400 naming the limit."""
    body = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi " * 500}]}
                      ).encode()
    parts = [body[i:i + 300] for i in range(0, len(body), 300)]
    with serving(tmp_path) as (gw, up):
        with httpx.Client(base_url=gw.url, timeout=30) as client:
            def post(data: bytes) -> httpx.Response:
                return client.post("/v1/chat/completions", content=data, headers={
                    "content-type": "application/json", "content-encoding": "gzip"})
            whole = post(b"".join(gzip.compress(p) for p in parts))
            many = post(gzip.compress(body) + gzip.compress(b"") * 64)
        forwarded = [r.json for r in up.requests]
    assert len(parts) > 1
    assert whole.status_code == 200, whole.text
    assert forwarded[0]["messages"][0]["content"] == "hi " * 500
    assert many.status_code == 400, many.text
    assert "more than 64 gzip members" in many.json()["error"]["message"]
    assert len(forwarded) == 1


def test_a_transfer_coding_before_chunked_is_undone_or_refused_by_name(
        tmp_path: Path) -> None:
    """``Transfer-Encoding: gzip, chunked`` on a request: the server undid the chunking
    and the gzip body was read as JSON as it was, a 400 "request body is not valid
    UTF-8 (byte 1)"; ``br, chunked`` got the same. A gzip or deflate transfer coding is
    now undone as a content coding is (within ``max_body_bytes``, decoded); one the
    gateway does not undo is a 501 naming the header (RFC 9112, 6.1), and the
    connection serves the next request."""
    body = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi"}]}
                      ).encode()
    squeeze = zlib.compressobj(9)
    bomb = b"".join(squeeze.compress(bytes(1 << 20)) for _ in range(64)) + squeeze.flush()
    cases = {
        "gzip": _post("Transfer-Encoding: gzip, chunked\r\n", _chunked(gzip.compress(body))),
        "deflate": _post("Transfer-Encoding: deflate, chunked\r\n",
                         _chunked(zlib.compress(body))),
        "both": _post("Content-Encoding: gzip\r\nTransfer-Encoding: deflate, chunked\r\n",
                      _chunked(zlib.compress(gzip.compress(body)))),
        "bomb": _post("Transfer-Encoding: deflate, chunked\r\n", _chunked(bomb)),
        "br": _post("Transfer-Encoding: br, chunked\r\n", _chunked(body)),
    }
    with FakeUpstream() as up:
        answers, _, calls = _each_then_health(tmp_path, up, cases)

    def statuses(name: str) -> list[bytes]:
        return re.findall(rb"HTTP/1\.1 (\d{3}) ", answers[name])
    for name in ("gzip", "deflate", "both"):
        assert statuses(name) == [b"200", b"200"], (name, answers[name][:600])
    assert calls == 3
    assert statuses("bomb") == [b"413", b"200"], answers["bomb"][:600]
    assert b"decoded" in answers["bomb"]
    assert statuses("br") == [b"501", b"200"], answers["br"][:600]
    assert b"transfer-encoding" in answers["br"] and b"br" in answers["br"]


def test_a_coding_sent_on_two_header_lines_is_undone_as_one_list(tmp_path: Path) -> None:
    """A list-valued header may come as several lines, which mean one list in order
    (RFC 9110, 5.3). The gateway kept the last line alone: ``Content-Encoding: gzip``
    twice over a body gzipped twice was undone once and answered 400 "not valid
    UTF-8"; ``Transfer-Encoding: gzip`` then ``Transfer-Encoding: chunked`` lost the
    gzip the same way; and ``br`` then ``gzip`` was undone as gzip alone, a 400
    about the bytes instead of the 415 naming what the gateway does not undo."""
    body = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi"}]}
                      ).encode()
    twice = gzip.compress(gzip.compress(body))
    cases = {
        "ce-twice": _post("Content-Encoding: gzip\r\nContent-Encoding: gzip\r\n"
                          f"Content-Length: {len(twice)}\r\n", twice),
        "te-split": _post("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                          _chunked(gzip.compress(body))),
        "ce-br-first": _post("Content-Encoding: br\r\nContent-Encoding: gzip\r\n"
                             "Transfer-Encoding: chunked\r\n", _chunked(gzip.compress(body))),
    }
    with FakeUpstream() as up:
        answers, _, calls = _each_then_health(tmp_path, up, cases)

    def statuses(name: str) -> list[bytes]:
        return re.findall(rb"HTTP/1\.1 (\d{3}) ", answers[name])
    for name in ("ce-twice", "te-split"):
        assert statuses(name) == [b"200", b"200"], (name, answers[name][:600])
    assert calls == 2
    assert statuses("ce-br-first") == [b"415", b"200"], answers["ce-br-first"][:600]
    assert b"unsupported_encoding" in answers["ce-br-first"]


def test_an_answer_before_an_expected_body_closes_the_connection(tmp_path: Path) -> None:
    """``Expect: 100-continue`` answered from the head alone (a 413 for its
    ``Content-Length``, a 404): the client may never send the body (curl does not),
    so what comes next cannot be told from the body. The gateway kept the connection
    and read the client's next request as body bytes: it was never answered. The
    answer now says ``connection: close`` and the connection closes after it; a
    request answered after asking for its body, one with no body, and one whose
    client sent the body without waiting keep their connection."""
    def head(path: str, length: int, extra: str = "") -> bytes:
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Expect: 100-continue\r\nContent-Length: {length}\r\n{extra}\r\n").encode()
    body = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi"}]}
                      ).encode()
    next_request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    with serving(tmp_path) as (gw, _):
        answers = {}
        for name, path, length in (("over", "/v1/chat/completions", 500_000_000),
                                   ("unknown path", "/nope", 100)):
            s = connect(gw.port)
            s.sendall(head(path, length))
            first = b""
            while b"\r\n\r\n" not in first:  # the answer's head, then the next request
                first += s.recv(65536)
            s.sendall(next_request)
            answers[name] = first + read_answer(s, 10.0)
            s.close()
        # asked for (a 100 Continue, then the answer): the connection goes on
        s = connect(gw.port)
        s.sendall(head("/v1/chat/completions", len(body)))
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body + next_request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        answers["asked"] = read_answer(s, 10.0)
        s.close()
        # no body at all, and a body sent without waiting: the connection goes on
        s = connect(gw.port)
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"
                  + head("/nope", 10) + b"0123456789"
                  + next_request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        answers["no wait"] = read_answer(s, 10.0)
        s.close()

    for name in ("over", "unknown path"):
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answers[name])
        assert statuses == [b"413" if name == "over" else b"404"], (name, answers[name][:600])
        assert b"\r\nconnection: close\r\n" in answers[name].lower(), answers[name][:600]
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answers["asked"]) == [b"200", b"200"]
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answers["no wait"]) == [b"200", b"404", b"200"]


def test_a_closing_answer_waits_for_the_body_still_coming(tmp_path: Path) -> None:
    """A ``Connection: close`` request answered before its body is read (a 413 from
    its ``Content-Length``): the server closed at once, the body still arriving met a
    reset, and Python's ``http.client``, which sends the whole body before reading,
    raised ``ConnectionResetError`` instead of giving the 413. The close now drains
    the body, and closes once the client stops; a client that never stops is cut at
    ``body_timeout_secs``."""
    with serving(tmp_path, "body_timeout_secs = 1") as (gw, _):
        outcomes = []
        for _ in range(3):
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
            try:
                conn.request("POST", "/v1/chat/completions", body=bytes(40_000_000),
                             headers={"Connection": "close"})
                outcomes.append(conn.getresponse().status)
            except OSError as e:
                outcomes.append(type(e).__name__)
            conn.close()
        assert outcomes == [413, 413, 413]
        # A body that keeps trickling after the answer: closed at the body timeout.
        s = connect(gw.port)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Length: 500000000\r\n\r\n")
        s.settimeout(0.1)
        got, closed, deadline = b"", False, time.monotonic() + 15
        while not closed and time.monotonic() < deadline:
            try:  # the answer, then end of file (the server's half-close)
                s.sendall(bytes(1000))
                got += s.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # the reset: the server closed for good
                closed = True
        s.close()
        assert closed and got.startswith(b"HTTP/1.1 413 "), got[:200]
        assert '{reason="body_timeout"}' in scrape(gw.url, "humpyard_connections_refused_total")


def test_a_body_whose_framing_is_not_http_1_1_is_answered_400_and_recorded(
        tmp_path: Path) -> None:
    """The parser refuses a body after the head went to the app: a transfer coding
    that does not end in ``chunked`` (RFC 9112, 6.1: a server MUST answer 400 and
    close), a chunk size past 64 bits, chunk lines ended by a bare LF. The
    connection closed with no answer at all, and the request was recorded as a
    client that left (499). Each now gets a 400 naming what the parser found, and
    the record says 400."""
    body = json.dumps({"model": "t", "messages": [{"role": "user", "content": "hi"}]}
                      ).encode()
    cases = {
        "xchunked": (_post("Transfer-Encoding: xchunked\r\n", _chunked(body)),
                     "invalid Transfer-Encoding"),
        "gzip alone": (_post("Transfer-Encoding: gzip\r\n", gzip.compress(body)),
                       "invalid Transfer-Encoding"),
        "chunk size past 64 bits": (_post("Transfer-Encoding: chunked\r\n",
                                          b"ffffffffffffffffff\r\nab\r\n"), "Chunk size"),
        "bare LF": (_post("Transfer-Encoding: chunked\r\n",
                          f"{len(body):x}\n".encode() + body + b"\n0\n\n"), "CR after chunk size"),
    }
    with FakeUpstream() as up:
        answers, series, calls = _each_then_health(
            tmp_path, up, {name: request for name, (request, _) in cases.items()})
    assert calls == 0
    for name, (_, reason) in cases.items():
        answer = answers[name]
        # the request after it in the same write is not read: the connection closes
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"400"], (name, answer[:400])
        assert b"\r\nconnection: close\r\n" in answer
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == "bad_request" and "not valid HTTP/1.1" in error["message"]
        assert reason in error["message"], (name, error)
    assert series == {'{reason="malformed"}': len(cases)}, series
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        recorded = [(status, json.loads(body)) for status, body
                    in db.execute("SELECT status, body FROM decisions")]
    assert sorted(status for status, _ in recorded) == [400] * len(cases), recorded
    assert all("not valid HTTP/1.1" in json.dumps(d) for _, d in recorded), recorded


def test_a_body_that_breaks_after_its_answer_gets_no_second_answer(tmp_path: Path) -> None:
    """A chunked body past ``max_body_bytes`` is answered 413 while it still arrives
    (the rest is read and dropped, and the connection may go on); then its framing
    breaks. Before: a second answer, 400, followed the 413 on the same connection,
    which a keep-alive client reads as the answer to its next request. Now the
    connection closes after the one answer."""
    filler = b"a" * OVER
    with FakeUpstream() as up:
        cfg = write_config(tmp_path, up.url)
        cfg.write_text(f"max_body_bytes = {LIMIT}\n" + cfg.read_text())
        with ServeProcess(cfg, tmp_path / "serve.log") as gw:
            s = connect(gw.port)
            s.sendall(_post("Transfer-Encoding: chunked\r\n",
                            f"{len(filler):x}\r\n".encode() + filler + b"\r\n"))
            first = b""
            while b"\r\n\r\n" not in first or not first.rstrip().endswith(b"}"):
                data = s.recv(65536)
                assert data, first
                first += data
            assert re.findall(rb"HTTP/1\.1 (\d{3}) ", first) == [b"413"], first[:400]
            s.sendall(b"zz\r\n\r\n")  # not a chunk size: the framing is broken
            rest = read_answer(s, 10.0)
            s.close()
            series = scrape(gw.url, "humpyard_connections_refused_total")
    assert rest == b"", rest[:400]  # closed, nothing more said
    assert series == {'{reason="malformed"}': 1}, series
