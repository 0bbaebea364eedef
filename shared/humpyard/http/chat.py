"""``POST /v1/chat/completions``: OpenAI chat, buffered or streamed; the intake both
client paths share (``accept``) and their plain-ASGI ``Endpoint``."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Scope, Send

from humpyard.errors import HumpyardError
from humpyard.flow import Call, finish, new_request_id, serve
from humpyard.gateway import Gateway
from humpyard.http.body import header_dict, receive_json
from humpyard.http.errors import error_reply, internal_reply, json_reply
from humpyard.http.reply import Reply, send_reply, send_stream
from humpyard.keys import authenticate
from humpyard.protocols import sse
from humpyard.protocols.openai import validate_chat
from humpyard.records import Served

log = logging.getLogger("humpyard.http")


def route_headers(call: Call | None, served: Served | None, request_id: str) -> dict[str, str]:
    """The x-humpyard-* response headers for what is known so far."""
    h = {"x-humpyard-request-id": request_id}
    plan = call.plan if call else None
    if plan is not None:
        h["x-humpyard-route"] = plan.route
        h["x-humpyard-rule"] = plan.rule
    if served is not None:
        h["x-humpyard-target"] = served.target
        h["x-humpyard-provider"] = served.endpoint.provider
    return h


def record_refusal(gw: Gateway, request_id: str, headers: dict[str, str], body: object,
                   err: HumpyardError, protocol: str) -> None:
    """A request refused before planning (auth, malformed body) is still recorded."""
    call = Call(request_id=request_id, config=gw.config, key=None, headers=headers,
                body=body if isinstance(body, dict) else {}, protocol=protocol,
                ts=gw.clock.now())
    finish(gw, call, status=err.status, error=err)


BROKEN = "the upstream stream broke after the answer started; it is incomplete"


async def sse_bytes(served: Served) -> AsyncIterator[bytes]:
    """The upstream events as they came. A failure after the first content cannot
    fail over: the stream ends with an OpenAI-style error event instead."""
    events = served.events
    assert events is not None
    try:
        async for batch in events:
            yield batch[0].wire if len(batch) == 1 else b"".join(ev.wire for ev in batch)
    except HumpyardError as e:
        yield sse.encode(json.dumps({"error": {"message": e.message, "type": "api_error",
                                               "code": e.code}}))
    except Exception as e:  # noqa: BLE001 - a transport failure mid-stream
        log.warning("stream broke after content: %s", type(e).__name__)
        yield sse.encode(json.dumps({"error": {"message": BROKEN, "type": "api_error",
                                               "code": "stream_broken"}}))


Decode = Callable[[Any], tuple[dict[str, Any], list[str]]]


@dataclass
class Accepted:
    """A client request taken in: served (``call``/``served``) or answered (``error``)."""

    request_id: str
    call: Call | None = None
    served: Served | None = None
    error: Reply | None = None


async def accept(gw: Gateway, scope: Scope, receive: Receive, protocol: str,
                 decode: Decode) -> Accepted:
    """Authenticate, read, decode to an OpenAI chat body and serve; errors answered in the
    client protocol's shape, refusals before planning recorded too."""
    config = gw.config
    state = scope.get("state")
    rid = (state.get("humpyard_request_id") if state else None) or new_request_id()
    anthropic = protocol == "anthropic"
    call: Call | None = None
    headers: dict[str, str] = {}
    body: object = None
    try:
        headers = header_dict(scope["headers"])
        key = authenticate(config.keys, headers)
        body = await receive_json(receive, headers.get("content-length"),
                                  config.max_body_bytes)
        chat_body, notes = decode(body)
        call = Call(request_id=rid, config=config, key=key, headers=headers,
                    body=validate_chat(chat_body), protocol=protocol, notes=notes)
        served = await serve(gw, call)
    except HumpyardError as e:
        if call is None:
            record_refusal(gw, rid, headers, body, e, protocol)
        return Accepted(rid, error=error_reply(e, anthropic=anthropic,
                                               headers=route_headers(call, None, rid)))
    except Exception as e:  # noqa: BLE001 - answered as a 500, logged with its trace
        return Accepted(rid, error=internal_reply(e, anthropic=anthropic,
                                                  headers={"x-humpyard-request-id": rid}))
    return Accepted(rid, call=call, served=served)


class Endpoint:
    """A client path as a plain ASGI app (no Starlette ``Request``/``Response``):
    ``handler(gateway, scope, receive, send)``; the gateway is the app's."""

    def __init__(self, handler: Callable[[Gateway, Scope, Receive, Send], Awaitable[None]]):
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.handler(scope["app"].state.gateway, scope, receive, send)


async def chat_completions(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    got = await accept(gw, scope, receive, "openai", lambda body: (body, []))
    if got.error is not None:
        return await send_reply(send, got.error)
    served = got.served
    assert served is not None and got.call is not None
    out_headers = route_headers(got.call, served, got.request_id)
    if served.events is not None:
        return await send_stream(send, receive, out_headers, sse_bytes(served))
    reply = Reply(200, out_headers, served.body_bytes) if served.body_bytes is not None \
        else json_reply(served.body, 200, out_headers)
    await send_served(gw, got.call, served, send, reply)


async def send_served(gw: Gateway, call: Call, served: Served, send: Send,
                      reply: Reply) -> None:
    """Send a buffered answer and record it: after sending, so that recording does not
    delay the client, unless the gateway must record first (Lambda, aws/flush.py)."""
    if gw.record_before_reply:
        finish(gw, call, status=200, served=served)
        return await send_reply(send, reply)
    try:
        await send_reply(send, reply)
    finally:
        finish(gw, call, status=200, served=served)
