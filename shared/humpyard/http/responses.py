"""``POST /v1/responses``: OpenAI Responses API clients (Codex CLI, the SDK's ``responses.*``).

The request is decoded into an OpenAI chat body (``protocols/responses_request``),
routed and served exactly like ``/v1/chat/completions`` (``RESPONSES`` is what
the intake, ``http/intake.py``, needs), and the answer is encoded back: a
buffered ``response`` object, or the Responses event stream the official SDK
expects. Errors use the Responses error body. What is carried and what is
refused: docs/clients.md, "Codex CLI and the Responses API".
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from humpyard.config.spec import Config
from humpyard.errors import HumpyardError
from humpyard.http.errors import json_reply
from humpyard.http.intake import ClientProtocol, Headers
from humpyard.http.reply import Reply
from humpyard.protocols.chat_chunks import note_dropped
from humpyard.protocols.responses import encode_response
from humpyard.protocols.responses_request import (
    ResponsesContext,
    decode,
)
from humpyard.protocols.responses_stream import ResponsesStreamTranslator, encode_event
from humpyard.protocols.sse import SSEEvent, json_objects
from humpyard.records import Call, Served

log = logging.getLogger("humpyard.http")

BROKEN = "the upstream stream broke after the answer started; it is incomplete"


def _decode(body: Any, config: Config) -> tuple[dict[str, Any], list[str], ResponsesContext]:
    return decode(body, forward_user=config.clients.forward_user)


def _response_id(call: Call) -> str:
    return "resp_" + call.request_id[4:]


def _answer(call: Call, context: ResponsesContext, served: Served, headers: Headers) -> Reply:
    assert served.body is not None
    answer = encode_response(served.body, context, response_id=_response_id(call),
                             created_at=int(call.ts))
    return json_reply(answer, 200, headers)


async def _stream(call: Call, context: ResponsesContext,
                  events: AsyncIterator[list[SSEEvent]]) -> AsyncIterator[bytes]:
    """Upstream chat chunks → Responses events, one write per upstream read.

    A break after the first content (hold-back rules out earlier ones) ends
    the stream with ``error`` then ``response.failed``, so the client knows
    the answer is incomplete.
    """
    translator = call.encoder
    if not isinstance(translator, ResponsesStreamTranslator):  # else a stopped stream's end
        translator = call.encoder = ResponsesStreamTranslator(context, _response_id(call),
                                                              int(call.ts))
    failed: list[tuple[str, dict]] | None = None
    try:
        async for batch in events:
            out = [encode_event(name, data) for chunk in json_objects(batch)
                   for name, data in translator.feed(chunk)]
            if out:
                yield b"".join(out)
    except HumpyardError as e:  # an upstream error event after the first content
        failed = translator.fail(e.message, e.code or "server_error")
    except Exception as e:  # noqa: BLE001 - the stream broke; the decision records why
        log.warning("responses stream broke after content: %s", type(e).__name__)
        failed = translator.fail(BROKEN, "stream_broken")
    note_dropped(call.notes, translator.dropped_fragments)
    closing = failed if failed is not None else translator.finish()
    yield b"".join(encode_event(name, data) for name, data in closing)


RESPONSES = ClientProtocol(name="responses", decode=_decode, answer=_answer, stream=_stream,
                           errors="responses")
