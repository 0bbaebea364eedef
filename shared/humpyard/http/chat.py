"""``POST /v1/chat/completions``: OpenAI chat clients, buffered or streamed.

The body already is the gateway's own request shape, and the upstream's
answer is relayed as it came: a buffered body byte for byte, a stream event
by event. ``OPENAI_CHAT`` is what the intake (``http/intake.py``) needs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from humpyard.config.spec import Config
from humpyard.errors import HumpyardError
from humpyard.http.errors import json_reply
from humpyard.http.intake import ClientProtocol, Headers
from humpyard.http.reply import Reply
from humpyard.protocols import sse
from humpyard.protocols.sse import SSEEvent
from humpyard.records import Call, Served

log = logging.getLogger("humpyard.http")

BROKEN = "the upstream stream broke after the answer started; it is incomplete"


def _decode(body: Any, config: Config) -> tuple[dict[str, Any], list[str], None]:
    return body, [], None


def _answer(call: Call, context: None, served: Served, headers: Headers) -> Reply:
    if served.body_bytes is not None:
        return Reply(200, headers, served.body_bytes)
    return json_reply(served.body, 200, headers)


async def _stream(call: Call, context: None,
                  events: AsyncIterator[list[SSEEvent]]) -> AsyncIterator[bytes]:
    """The upstream events as they came. A failure after the first content cannot
    fail over: the stream ends with an OpenAI-style error event instead."""
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


OPENAI_CHAT = ClientProtocol(name="openai", decode=_decode, answer=_answer, stream=_stream)
