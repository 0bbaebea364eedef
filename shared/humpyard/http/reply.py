"""Answers on the two client paths, sent as ASGI messages without Starlette's
``Response`` objects (they are most of a request's framework cost:
docs/decisions/0003-performance.md).

A stream stops as soon as the client goes away: a listener waits for
``http.disconnect`` and cancels the sending task, so the upstream stream is
closed (and the decision recorded) instead of read to its end for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import NamedTuple

from starlette.types import Receive, Send

SSE_TYPE = b"text/event-stream; charset=utf-8"
# Keep proxies from buffering an event stream.
SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class Reply(NamedTuple):
    """A whole answer: status, extra headers, body bytes."""

    status: int
    headers: dict[str, str]
    body: bytes
    media_type: str = "application/json"


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_reply(send: Send, reply: Reply) -> None:
    raw = _raw(reply.headers)
    raw.append((b"content-type", reply.media_type.encode("latin-1")))
    raw.append((b"content-length", str(len(reply.body)).encode("ascii")))
    await send({"type": "http.response.start", "status": reply.status, "headers": raw})
    await send({"type": "http.response.body", "body": reply.body})


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


HEARTBEAT = b": keep-alive\n\n"


async def send_stream(send: Send, receive: Receive, headers: dict[str, str],
                      chunks: AsyncIterator[bytes], heartbeat_secs: float = 0) -> None:
    """A 200 event stream, one body message per chunk; ``chunks`` is closed at the end
    whether it ran out, failed or the client left.

    With ``heartbeat_secs``, every silence that long between chunks is filled with an
    SSE comment (``HEARTBEAT``, which every SSE client skips), so an idle timeout on
    the way (API Gateway's, a proxy's) never cuts a stream whose model is thinking.
    The timer is re-armed per chunk; a beat is never sent while a chunk is."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    sending = True
    beat: asyncio.Future[None] | None = None
    timer: asyncio.TimerHandle | None = None

    def pulse() -> None:
        nonlocal beat, timer
        beat = asyncio.ensure_future(
            send({"type": "http.response.body", "body": HEARTBEAT, "more_body": True}))
        timer = loop.call_later(heartbeat_secs, pulse)

    def client_left(listener: asyncio.Future[None]) -> None:
        if sending and not listener.cancelled() and listener.exception() is None:
            task.cancel()

    listener = asyncio.ensure_future(_until_disconnect(receive))
    listener.add_done_callback(client_left)
    raw = _raw(headers)
    raw.append((b"content-type", SSE_TYPE))
    raw.extend(SSE_HEADERS)
    try:
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        if heartbeat_secs > 0:
            timer = loop.call_later(heartbeat_secs, pulse)
        async for chunk in chunks:
            if timer is not None:
                timer.cancel()
                if beat is not None:
                    await beat  # never two sends at once
                    beat = None
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if heartbeat_secs > 0:
                timer = loop.call_later(heartbeat_secs, pulse)
        if timer is not None:
            timer.cancel()
            if beat is not None:
                await beat
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not (listener.done() and not listener.cancelled()):
            raise  # cancelled from outside, not by the client leaving
        task.uncancel()
    finally:
        sending = False
        listener.cancel()
        if timer is not None:
            timer.cancel()
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
