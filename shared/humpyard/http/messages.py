"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic clients.

The request is decoded into an OpenAI chat body, routed and served exactly
like ``/v1/chat/completions``, and the answer (or the stream, event by event)
is encoded back into Anthropic's shapes. Errors use Anthropic's error body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from humpyard.errors import HumpyardError
from humpyard.flow import finish
from humpyard.gateway import Gateway
from humpyard.http.body import lower_headers, read_json
from humpyard.http.chat import Endpoint, accept, route_headers, send_served
from humpyard.http.errors import (
    error_response,
    internal_error,
    internal_reply,
    json_reply,
    json_response,
)
from humpyard.http.reply import send_reply, send_stream
from humpyard.keys import authenticate
from humpyard.planning.estimate import estimate_prompt_tokens
from humpyard.protocols.anthropic import decode_request, encode_response, error_body
from humpyard.protocols.anthropic_stream import StreamTranslator, encode_event
from humpyard.records import Served

log = logging.getLogger("humpyard.http")


async def _translate(served: Served, translator: StreamTranslator) -> AsyncIterator[bytes]:
    """Upstream SSE → Anthropic events.

    An upstream error event, or a stream that breaks, after the first content
    (hold-back rules out earlier ones) ends the client's stream with
    Anthropic's ``error`` event instead of ``message_stop``, so the client
    knows the answer is incomplete. The upstream stream is always closed.
    """
    events = served.events
    assert events is not None
    failure: str | None = None
    try:
        async for batch in events:
            out: list[bytes] = []
            for ev in batch:
                if ev.data == "[DONE]":
                    continue
                try:
                    chunk = json.loads(ev.data)
                except ValueError:
                    continue
                if isinstance(chunk, dict):
                    out.extend(encode_event(name, data) for name, data in translator.feed(chunk))
            if out:
                yield b"".join(out)  # one write per upstream read
    except HumpyardError as e:  # an upstream error event after the first content
        failure = e.message
    except Exception as e:  # noqa: BLE001 - the stream broke; the decision records why
        log.warning("anthropic stream broke after content: %s", e)
        failure = "the upstream stream broke after the answer started; it is incomplete"
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    if failure is not None:
        yield encode_event("error", error_body(502, failure))
        return
    yield b"".join(encode_event(name, data) for name, data in translator.finish())


async def messages(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    got = await accept(gw, scope, receive, "anthropic", decode_request)
    if got.error is not None:
        return await send_reply(send, got.error)
    call, served, rid = got.call, got.served, got.request_id
    assert call is not None and served is not None
    out_headers = route_headers(call, served, rid)
    model = call.body["model"]
    stops = call.body.get("stop") if isinstance(call.body.get("stop"), list) else None
    if served.events is not None:
        translator = StreamTranslator(model, "msg_" + rid[4:], stops)
        return await send_stream(send, receive, out_headers, _translate(served, translator))
    assert served.body is not None
    try:
        answer = encode_response(served.body, model=model, stop_sequences=stops,
                                 message_id="msg_" + rid[4:])
    except Exception as e:  # noqa: BLE001 - a bug: answered as a 500, still recorded
        finish(gw, call, status=500, error=HumpyardError("internal error; see the gateway log"))
        return await send_reply(send, internal_reply(e, anthropic=True,
                                                     headers={"x-humpyard-request-id": rid}))
    await send_served(gw, call, served, send, json_reply(answer, 200, out_headers))


async def count_tokens(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        authenticate(gw.config.keys, lower_headers(request))
        body = await read_json(request, gw.config.max_body_bytes)
        if isinstance(body, dict):
            body = {"max_tokens": 1, **body}
        openai_body, _ = decode_request(body)  # type: ignore[arg-type]
        high, _low = estimate_prompt_tokens(openai_body)
    except HumpyardError as e:
        return error_response(e, anthropic=True)
    except Exception as e:  # noqa: BLE001
        return internal_error(e, anthropic=True)
    return json_response({"input_tokens": high})


def routes() -> list[Route]:
    return [
        Route("/v1/messages", Endpoint(messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
    ]
