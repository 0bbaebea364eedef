"""Every request limit, one explicit test each: a 4xx that names the problem, at once.

DESIGN "Request limits": ``max_body_bytes`` → 413; header count and size →
431; JSON nesting, message and tool counts, invalid UTF-8 and absurd numbers
→ 400 naming the field. For each: the status and message, the client
protocol's error shape, no upstream call, an answer well under a second, and
the gateway still serving afterwards. Most run in-process; the ones where the
HTTP server could answer first run over a real socket too.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from humpyard.http.body import MAX_HEADER_BYTES, MAX_HEADER_COUNT, MAX_JSON_DEPTH
from humpyard.protocols import anthropic, openai
from tests.fuzz.app import MAX_BODY, fuzz_app
from tests.support.servers import ServerThread

MSG = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
FAST = 1.0  # seconds: a refusal never waits on anything


class Calls:
    """The fuzz app with its upstream calls counted."""

    def __init__(self) -> None:
        self.app, self.gw = fuzz_app()
        self.transport = self.gw.client.http._transport  # the MockTransport
        self.upstream = 0
        handler = self.transport.handler

        def counting(request: httpx.Request) -> httpx.Response:
            self.upstream += 1
            return handler(request)
        self.transport.handler = counting

    def post(self, path: str, *, content: bytes | None = None, json_body: object = None,
             headers: dict[str, str] | list[tuple[str, str]] | None = None,
             ) -> tuple[httpx.Response, float]:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                if json_body is not None:
                    return await c.post(path, json=json_body, headers=headers)
                return await c.post(path, content=content, headers={
                    "content-type": "application/json", **dict(headers or {})})
        started = time.monotonic()
        resp = asyncio.run(go())
        return resp, time.monotonic() - started


@pytest.fixture
def gw():
    calls = Calls()
    yield calls
    calls.gw.writer.close()
    calls.gw.store.close()


def refused(calls: Calls, path: str, status: int, contains: str, **kw: object) -> str:
    resp, elapsed = calls.post(path, **kw)  # type: ignore[arg-type]
    assert resp.status_code == status, resp.text
    assert elapsed < FAST
    body = resp.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
        message = body["error"]["message"]
    else:
        message = body["error"]["message"]
        assert body["error"]["type"] == "invalid_request_error"
    assert contains in message, message
    assert calls.upstream == 0
    ok, _ = calls.post(CHAT, json_body={"model": "r", "messages": MSG})
    assert ok.status_code == 200  # still serving
    calls.upstream = 0
    return message


# -- body size -------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_body_over_max_body_bytes_is_413(gw, path):
    big = json.dumps({"model": "r", "max_tokens": 5, "messages": [
        {"role": "user", "content": "x" * MAX_BODY}]}).encode()
    msg = refused(gw, path, 413, f"the limit is {MAX_BODY}", content=big)
    assert f"request body is {len(big)} bytes" in msg


def test_body_over_the_limit_without_content_length_is_413(gw):
    async def chunks():
        for _ in range(5):
            yield b"x" * (MAX_BODY // 4)
    resp, elapsed = gw.post(CHAT, content=chunks())  # type: ignore[arg-type]
    assert resp.status_code == 413 and elapsed < FAST
    assert resp.json()["error"]["message"] == \
        f"request body is over the limit of {MAX_BODY} bytes"


def test_a_lying_content_length_is_400(gw):
    refused(gw, CHAT, 400, "content-length: not a number", content=b"{}",
            headers={"content-length": "many"})


# -- headers ---------------------------------------------------------------------------


def test_too_many_headers_is_431(gw):
    headers = [(f"x-h{i}", "v") for i in range(MAX_HEADER_COUNT + 1)]
    resp, _ = gw.post(CHAT, json_body={"model": "r", "messages": MSG}, headers=headers)
    assert resp.status_code == 431
    assert resp.json()["error"]["code"] == "headers_too_large"
    assert f"at most {MAX_HEADER_COUNT} headers" in resp.json()["error"]["message"]
    assert gw.upstream == 0


@pytest.mark.parametrize("path", [CHAT, MESSAGES, "/v1/route/explain"])
def test_headers_over_the_size_limit_are_431(gw, path):
    resp, _ = gw.post(path, json_body={"model": "r", "max_tokens": 5, "messages": MSG},
                      headers={"x-big": "v" * MAX_HEADER_BYTES})
    assert resp.status_code == 431
    assert f"the limit is {MAX_HEADER_BYTES}" in resp.text
    assert gw.upstream == 0


def test_header_limits_hold_over_a_real_socket():
    app, gw = fuzz_app()
    with ServerThread(app, lifespan="on") as srv, httpx.Client(base_url=srv.url,
                                                               timeout=5) as c:
        body = {"model": "r", "messages": MSG}
        many = c.post(CHAT, json=body, headers={f"x-h{i}": "v" for i in range(150)})
        big = c.post(CHAT, json=body, headers={"x-big": "v" * (2 * MAX_HEADER_BYTES)})
        huge = c.post(CHAT, content=b"x" * (2 * MAX_BODY),
                      headers={"content-type": "application/json"})
        assert (many.status_code, big.status_code, huge.status_code) == (431, 431, 413)
        assert c.post(CHAT, json=body).status_code == 200


# -- JSON shape ---------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_nesting_deeper_than_the_limit_is_400(gw, depth):
    deep = b'{"model": "r", "messages": ' + b"[" * depth + b"]" * depth + b"}"
    refused(gw, CHAT, 400, f"nests deeper than {MAX_JSON_DEPTH} levels", content=deep)


def test_nesting_at_the_limit_is_fine(gw):
    inner = "[" * (MAX_JSON_DEPTH - 3) + "]" * (MAX_JSON_DEPTH - 3)
    body = f'{{"model": "r", "messages": [{{"role": "user", "content": "hi", "x": {inner}}}]}}'
    resp, _ = gw.post(CHAT, content=body.encode())
    assert resp.status_code == 200


def test_too_many_messages_is_400(gw):
    many = [{"role": "user", "content": "x"}] * (openai.MAX_MESSAGES + 1)
    refused(gw, CHAT, 400, f"messages: at most {openai.MAX_MESSAGES} messages",
            json_body={"model": "r", "messages": many})


def test_too_many_messages_on_the_anthropic_path_is_400(gw):
    many = [{"role": "user", "content": "x"}] * (openai.MAX_MESSAGES + 1)
    refused(gw, MESSAGES, 400, f"messages: at most {openai.MAX_MESSAGES} messages",
            json_body={"model": "r", "max_tokens": 5, "messages": many})


def test_too_many_tools_is_400(gw):
    tools = [{"type": "function", "function": {"name": f"f{i}"}}
             for i in range(openai.MAX_TOOLS + 1)]
    refused(gw, CHAT, 400, f"tools: at most {openai.MAX_TOOLS} tools",
            json_body={"model": "r", "messages": MSG, "tools": tools})


def test_too_many_tools_on_the_anthropic_path_is_400(gw):
    tools = [{"name": f"f{i}", "input_schema": {"type": "object"}}
             for i in range(openai.MAX_TOOLS + 1)]
    refused(gw, MESSAGES, 400, f"tools: at most {openai.MAX_TOOLS} tools",
            json_body={"model": "r", "max_tokens": 5, "messages": MSG, "tools": tools})


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
@pytest.mark.parametrize("body,contains", [
    (b"", "request body is empty"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"model": "r", "messages": [', "not valid JSON"),
])
def test_malformed_bodies_are_400(gw, path, body, contains):
    refused(gw, path, 400, contains, content=body)


@pytest.mark.parametrize("role", [["user"], {"r": 1}, 7, None])
def test_a_role_that_is_not_a_string_is_400(gw, role):
    # a list or an object here used to be a 500 (unhashable in the set of roles)
    refused(gw, CHAT, 400, "messages[0].role: must be one of",
            json_body={"model": "r", "messages": [{"role": role, "content": "x"}]})


# -- encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, MESSAGES, "/v1/messages/count_tokens"])
def test_invalid_utf8_is_400(gw, path):
    body = b'{"model": "r", "max_tokens": 5, "messages": [{"role": "user", "content": "\xff"}]}'
    refused(gw, path, 400, f"not valid UTF-8 (byte {body.index(0xff)})", content=body)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "x\\ud83dy"])
def test_an_unpaired_surrogate_escape_is_400(gw, escape):
    body = f'{{"model": "r", "messages": [{{"role": "user", "content": "{escape}"}}]}}'
    refused(gw, CHAT, 400, "an unpaired surrogate", content=body.encode())


def test_a_paired_surrogate_escape_is_a_character(gw):
    body = b'{"model": "r", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    resp, _ = gw.post(CHAT, content=body)
    assert resp.status_code == 200


def test_an_unpaired_surrogate_in_the_model_name_is_400_not_500(gw):
    refused(gw, CHAT, 400, "an unpaired surrogate",
            content=b'{"model": "\\ud800", "messages": [{"role": "user", "content": "x"}]}')


# -- numbers ----------------------------------------------------------------------------

BIG = 10**100


@pytest.mark.parametrize("field,value,contains", [
    ("max_tokens", BIG, "max_tokens: must be an integer from 0 to"),
    ("max_tokens", openai.MAX_TOKENS_LIMIT + 1, "max_tokens: must be an integer from 0 to"),
    ("max_completion_tokens", BIG, "max_completion_tokens: must be an integer"),
    ("n", -1, "n: must be an integer"),
    ("temperature", BIG, "temperature: must be a number from 0 to 100"),
    ("top_p", -BIG, "top_p: must be a number from 0 to 100"),
    ("temperature", 1e308, "temperature: must be a number from 0 to 100"),
])
def test_absurd_numbers_on_the_openai_path_are_400(gw, field, value, contains):
    refused(gw, CHAT, 400, contains, json_body={"model": "r", "messages": MSG, field: value})


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("value", ["include_usage", [["include_usage", True, 1]], 7])
def test_stream_options_that_is_not_an_object_is_400(gw, stream, value):
    refused(gw, CHAT, 400, "stream_options: must be an object", json_body={
        "model": "r", "messages": MSG, "stream": stream, "stream_options": value})


@pytest.mark.parametrize("field,value,contains", [
    ("max_tokens", BIG, f"is over the limit of {anthropic.MAX_TOKENS_LIMIT}"),
    ("max_tokens", anthropic.MAX_TOKENS_LIMIT + 1, "is over the limit of"),
    ("temperature", BIG, "temperature: must be between 0 and 1"),
    ("top_p", 1e308, "top_p: must be between 0 and 1"),
])
def test_absurd_numbers_on_the_anthropic_path_are_400(gw, field, value, contains):
    refused(gw, MESSAGES, 400, contains, json_body={
        "model": "r", "max_tokens": 5, "messages": MSG, field: value})


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "1E+400"])
@pytest.mark.parametrize("field", ["temperature", "max_tokens", "presence_penalty"])
def test_numbers_beyond_a_double_are_400(gw, literal, field):
    body = f'{{"model": "r", "messages": [{{"role": "user", "content": "x"}}], ' \
           f'"{field}": {literal}}}'
    refused(gw, CHAT, 400, f"number out of range: {literal}", content=body.encode())


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(gw, literal):
    body = f'{{"model": "r", "messages": [{{"role": "user", "content": "x"}}], ' \
           f'"temperature": {literal}}}'
    refused(gw, CHAT, 400, f"request body has {literal}, which is not JSON", content=body.encode())


def test_an_integer_too_long_to_read_is_400(gw):
    body = b'{"model": "r", "messages": [], "max_tokens": ' + b"9" * 5000 + b"}"
    refused(gw, CHAT, 400, "an integer with more than 4300 digits", content=body)


def test_override_expiry_cannot_be_infinite(gw):
    resp, _ = gw.post("/v1/overrides", content=b'{"kind": "disable_target", '
                      b'"subject": "first", "expires_in_secs": Infinity}')
    assert resp.status_code == 400 and "Infinity" in resp.json()["error"]["message"]


@pytest.mark.parametrize("query,contains", [
    ("/v1/stats?window_secs=1e999", "window_secs: must be a finite number"),
    ("/v1/stats?window_secs=nan", "window_secs: must be a finite number"),
    ("/v1/stats?window_secs=-5", "window_secs: must be positive"),
    ("/v1/decisions?since=inf", "since: must be a finite number"),
    ("/v1/quota/history?since=nan", "since: must be a finite number"),
    ("/v1/decisions?limit=" + "9" * 5000, "limit: must be a whole number from 1 to 1000"),
    # Each field named on its own ("limit and since must be numbers" named both).
    ("/v1/decisions?limit=1e400", "limit: must be a whole number from 1 to 1000, got '1e400'"),
    ("/v1/decisions?since=abc", "since: must be a number, got 'abc'"),
    ("/v1/quota/history?limit=ten", "limit: must be a whole number from 1 to 5000"),
    # Out of range is refused too: 0 gave one decision and 5000 gave 1000, silently.
    ("/v1/decisions?limit=0", "limit: must be a whole number from 1 to 1000, got '0'"),
    ("/v1/decisions?limit=-3", "limit: must be a whole number from 1 to 1000, got '-3'"),
    ("/v1/decisions?limit=1001", "limit: must be a whole number from 1 to 1000, got '1001'"),
    ("/v1/quota/history?limit=5001", "limit: must be a whole number from 1 to 5000, got '5001'"),
    ("/v1/quota/history?since=yesterday", "since: must be a number, got 'yesterday'"),
])
def test_absurd_query_numbers_are_400(gw, query, contains):
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=gw.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            return await c.get(query)
    resp = asyncio.run(go())
    assert resp.status_code == 400, resp.text
    assert contains in resp.json()["error"]["message"]


def test_a_huge_window_is_clamped_not_a_500(gw):
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=gw.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            return await c.get("/v1/stats?window_secs=1e300")
    resp = asyncio.run(go())
    assert resp.status_code == 200 and resp.json()["window_secs"] == 3660 * 86400


def test_refusals_are_recorded(gw):
    resp, _ = gw.post(CHAT, content=b'{"model": "r", "temperature": NaN}')
    assert resp.status_code == 400
    gw.gw.writer.flush(timeout=5)
    rid = resp.headers["x-humpyard-request-id"]
    decision = gw.gw.store.get_decision(rid)
    assert decision["outcome"] == "invalid_request" and decision["status"] == 400
