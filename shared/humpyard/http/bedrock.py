"""``POST /model/{modelId}/invoke`` and ``/invoke-with-response-stream``: Bedrock clients.

Claude Code with ``CLAUDE_CODE_USE_BEDROCK=1`` and ``ANTHROPIC_BEDROCK_BASE_URL``
pointing here (``CLAUDE_CODE_SKIP_BEDROCK_AUTH=1``: no SigV4), the ``anthropic``
SDK's ``AnthropicBedrock`` and boto3's ``bedrock-runtime`` client speak Amazon
Bedrock's InvokeModel. ``protocols/bedrock_client.to_messages`` turns the
request into the Anthropic Messages request it stands for (the path's model as
``model``; the body's ``anthropic_beta`` as ``anthropic-beta``) before the
intake decodes it, so from there it is ``/v1/messages``: the same routing (the
path's model names the route as ``model`` does), keys, limits, hold-back,
disconnects and record (``protocol: "bedrock"``), and an Anthropic upstream gets
the client's own body.

The answer is Anthropic's Messages JSON; a stream is Bedrock's event stream, one
``chunk`` message per Anthropic event. Errors are Bedrock's (``x-amzn-ErrorType``);
a stream broken after its first content ends with a ``modelStreamErrorException``
message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.types import Scope

from humpyard.errors import HumpyardError
from humpyard.http.intake import ClientProtocol, Headers
from humpyard.http.messages import ANTHROPIC_MESSAGES
from humpyard.protocols.anthropic_stream import StreamTranslator
from humpyard.protocols.bedrock_client import PING, chunk, stream_exception, to_messages
from humpyard.protocols.chat_chunks import note_dropped
from humpyard.protocols.sse import SSEEvent, json_objects
from humpyard.records import Call

log = logging.getLogger("humpyard.http")

EVENT_STREAM_TYPE = b"application/vnd.amazon.eventstream"
BROKEN = "the upstream stream broke after the answer started; it is incomplete"


def _prepare(stream: bool) -> Callable[[Any, Scope, Headers], tuple[Any, Headers]]:
    """The intake's ``prepare`` for one of the two paths: the path's model and
    ``stream`` into the body (``protocols/bedrock_client.to_messages``)."""

    def prepare(body: Any, scope: Scope, headers: Headers) -> tuple[Any, Headers]:
        model = (scope.get("path_params") or {}).get("model", "")
        return to_messages(body, model, stream, headers)
    return prepare


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


async def _stream(call: Call, context: None,
                  events: AsyncIterator[list[SSEEvent]]) -> AsyncIterator[bytes]:
    """Upstream events → Bedrock ``chunk`` messages, one write per upstream read: an
    Anthropic upstream's events as they came, any other's translated."""
    translator = None
    if call.native != "anthropic":
        stops = call.body.get("stop")
        translator = StreamTranslator(call.body["model"], "msg_" + call.request_id[4:],
                                      stops if isinstance(stops, list) else None)
    try:
        async for batch in events:
            if translator is None:
                out = [chunk(ev.data.encode()) for ev in batch if ev.data]
            else:
                out = [chunk(_dumps(data)) for c in json_objects(batch)
                       for _, data in translator.feed(c)]
            if out:
                yield b"".join(out)
    except HumpyardError as e:  # an upstream error event after the first content, or
        yield stream_exception(e.message, e.status)  # every target failing after a beat
        return
    except Exception as e:  # noqa: BLE001 - the stream broke; the decision records why
        log.warning("bedrock stream broke after content: %s", type(e).__name__)
        yield stream_exception(BROKEN)
        return
    finally:
        if translator is not None:
            note_dropped(call.notes, translator.dropped_fragments)
    if translator is not None:
        yield b"".join(chunk(_dumps(data)) for _, data in translator.finish())


BEDROCK_INVOKE = ClientProtocol(name="bedrock", decode=ANTHROPIC_MESSAGES.decode,
                                answer=ANTHROPIC_MESSAGES.answer, stream=_stream,
                                errors="bedrock", prepare=_prepare(False))
BEDROCK_STREAM = ClientProtocol(name="bedrock", decode=ANTHROPIC_MESSAGES.decode,
                                answer=ANTHROPIC_MESSAGES.answer, stream=_stream,
                                errors="bedrock", prepare=_prepare(True),
                                stream_type=EVENT_STREAM_TYPE, heartbeat=PING)
