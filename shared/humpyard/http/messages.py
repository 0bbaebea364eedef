"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic clients.

The request is decoded into an OpenAI chat body, routed and served exactly
like ``/v1/chat/completions`` (``ANTHROPIC_MESSAGES`` is what the intake,
``http/intake.py``, needs), and the answer, or the stream event by event, is
encoded back into Anthropic's shapes. Errors use Anthropic's error body.
An Anthropic-native upstream got the client's own body (``Served.native``):
its answer goes back as it came, body bytes and events untouched.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from humpyard.config.spec import Config
from humpyard.errors import HumpyardError
from humpyard.flow import count_tokens as count_upstream_tokens
from humpyard.http.body import lower_headers, read_json
from humpyard.http.errors import error_response, internal_error, json_reply, json_response
from humpyard.http.guard import gateway
from humpyard.http.intake import ClientProtocol, Headers
from humpyard.http.reply import Reply
from humpyard.keys import authenticate
from humpyard.planning.estimate import estimate_prompt_tokens
from humpyard.protocols.anthropic import (
    ERROR_TYPES,
    decode_request,
    encode_response,
    error_body,
)
from humpyard.protocols.anthropic_stream import StreamTranslator, encode_event
from humpyard.protocols.chat_chunks import note_dropped
from humpyard.protocols.sse import SSEEvent, json_objects
from humpyard.records import Call, Served, new_request_id

log = logging.getLogger("humpyard.http")


def _stops(call: Call) -> list[str] | None:
    stop = call.body.get("stop")
    return stop if isinstance(stop, list) else None


def _message_id(call: Call) -> str:
    return "msg_" + call.request_id[4:]


def _decode(body: Any, config: Config) -> tuple[dict[str, Any], list[str], None]:
    chat, notes = decode_request(body, keep_billing_header=config.clients.keep_billing_header,
                                 forward_user=config.clients.forward_user)
    return chat, notes, None


def _answer(call: Call, context: None, served: Served, headers: Headers) -> Reply:
    if served.native == "anthropic" and served.body_bytes is not None:
        return Reply(200, headers, served.body_bytes)
    assert served.body is not None
    answer = encode_response(served.body, model=call.body["model"], stop_sequences=_stops(call),
                             message_id=_message_id(call))
    return json_reply(answer, 200, headers)


async def _stream(call: Call, context: None,
                  events: AsyncIterator[list[SSEEvent]]) -> AsyncIterator[bytes]:
    """Upstream SSE → Anthropic events.

    An upstream error event, or a stream that breaks, after the first content
    (hold-back rules out earlier ones) ends the client's stream with
    Anthropic's ``error`` event instead of ``message_stop``, so the client
    knows the answer is incomplete.
    """
    if call.native == "anthropic":
        async for chunk in _relay(events):
            yield chunk
        return
    translator = StreamTranslator(call.body["model"], _message_id(call), _stops(call))
    failure: str | None = None
    try:
        async for batch in events:
            out = [encode_event(name, data) for chunk in json_objects(batch)
                   for name, data in translator.feed(chunk)]
            if out:
                yield b"".join(out)  # one write per upstream read
    except HumpyardError as e:  # an upstream error event after the first content
        failure = e.message
    except Exception as e:  # noqa: BLE001 - the stream broke; the decision records why
        log.warning("anthropic stream broke after content: %s", e)
        failure = "the upstream stream broke after the answer started; it is incomplete"
    note_dropped(call.notes, translator.dropped_fragments)
    if failure is not None:
        yield encode_event("error", error_body(502, failure))
        return
    yield b"".join(encode_event(name, data) for name, data in translator.finish())


async def _relay(events: AsyncIterator[list[SSEEvent]]) -> AsyncIterator[bytes]:
    """An Anthropic upstream's events as they came (one write per upstream read);
    a failure after the first content ends the stream with an ``error`` event."""
    try:
        async for batch in events:
            yield batch[0].wire if len(batch) == 1 else b"".join(ev.wire for ev in batch)
    except HumpyardError as e:
        body = error_body(502, e.message)
        told = getattr(e, "upstream_type", None)
        if told in ERROR_TYPES:  # the upstream's own type (overloaded_error: a client
            body["error"]["type"] = told  # such as Claude Code backs off from it)
        yield encode_event("error", body)
    except Exception as e:  # noqa: BLE001 - a transport failure mid-stream
        log.warning("anthropic stream broke after content: %s", type(e).__name__)
        yield encode_event("error", error_body(
            502, "the upstream stream broke after the answer started; it is incomplete"))


ANTHROPIC_MESSAGES = ClientProtocol(name="anthropic", decode=_decode, answer=_answer,
                                    stream=_stream, errors="anthropic")


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the count of the upstream that would serve
    the request when it can count (an Anthropic upstream), else the gateway's own
    conservative estimate; ``x-humpyard-token-count`` says which (``upstream``,
    ``estimate``). docs/clients.md, "Anthropic upstreams"."""
    gw = gateway(request).services  # the request side only (services.py)
    try:
        headers = lower_headers(request)
        key = authenticate(gw.config.keys, headers)
        body: Any = await read_json(request, gw.config.max_body_bytes)
        openai_body, _, _ = _decode({"max_tokens": 1, **body} if isinstance(body, dict)
                                    else body, gw.config)
        call = Call(request_id=new_request_id(), config=gw.config, key=key, headers=headers,
                    body=openai_body, protocol=ANTHROPIC_MESSAGES.name, original=body)
        counted = await count_upstream_tokens(gw, call)
    except HumpyardError as e:
        return error_response(e, shape="anthropic")
    except Exception as e:  # noqa: BLE001
        return internal_error(e, shape="anthropic")
    if counted is not None:
        return json_response({"input_tokens": counted},
                             headers={"x-humpyard-token-count": "upstream"})
    # Planning, when it ran, has already sized the prompt (its high estimate).
    high = (call.facts.prompt_tokens if call.facts is not None
            else estimate_prompt_tokens(openai_body)[0])
    return json_response({"input_tokens": high}, headers={"x-humpyard-token-count": "estimate"})
