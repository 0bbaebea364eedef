"""Answers on the two client paths, sent as ASGI messages without Starlette's
``Response`` objects (they are most of a request's framework cost:
docs/decisions/0003-performance.md), and ``ClientWatch``, which notices a
client that goes away.

A request is watched from the moment its body is read until its answer is out:
one ``receive()`` is left pending beside the work (after the body an ASGI server
answers it only with ``http.disconnect``), and when the client leaves — while
the upstream is still thinking, during a stream's hold-back, or while a stream
is relayed — the request's task is cancelled at once, so the upstream call is
closed, its concurrency slot freed and nothing more is attempted
(docs/operations.md, "Clients that leave").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Protocol

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


WATCH_AFTER_SECS = 0.05
"""How long a request runs before its client is watched: an answer out sooner
(a cache hit, a benchmark's local upstream) never pays for the listening task;
a client leaving sooner is noticed at this point. docs/decisions/0012."""


class ClientWatch:
    """Watches one request's client from after its body until its answer is out.

    ``phase`` names what the request is doing (``waiting``: for a buffered
    answer; ``hold_back``: for a stream's first content; ``relaying``: the
    stream is being sent); the gateway's code moves it on. When
    ``http.disconnect`` arrives while a phase is set, ``left`` becomes that
    phase, ``on_left(phase)`` is called and the request's task is cancelled;
    the caller then tells that cancellation from any other with ``ours()``.
    ``stop()`` ends the watch, before the answer is sent (the server answers
    the pending ``receive()`` with ``http.disconnect`` once the response is
    complete too, which is not the client leaving).

    The listening starts ``after`` seconds (``WATCH_AFTER_SECS``): until then
    the watch is one timer, and a request answered sooner costs no more. Then,
    under the gateway's own server (``serving.py``), it is a callback on the
    connection's loss (``watch_lost``), reading resumed as uvicorn's
    ``receive()`` resumes it; under any other ASGI server it is one task (the
    pending ``receive()``) with no wake-up until the client leaves or the watch
    stops. Any message other than ``http.disconnect`` (none is due once the
    body is read) ends that task's watch rather than being waited past.
    """

    __slots__ = ("task", "phase", "left", "_on_left", "_receive", "_listener", "_timer",
                 "_wire")

    def __init__(self, receive: Receive, phase: str,
                 on_left: Callable[[str], None] | None = None,
                 after: float = WATCH_AFTER_SECS) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.phase: str | None = phase
        self.left: str | None = None
        self._on_left = on_left
        self._receive = receive
        self._listener: asyncio.Future[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._wire: Any = None  # the transport whose loss is watched
        if after > 0:
            self._timer = asyncio.get_running_loop().call_later(after, self._listen)
        else:
            self._listen()

    def _listen(self) -> None:
        self._timer = None
        if self.phase is None:
            return
        cycle: Any = getattr(self._receive, "__self__", None)  # uvicorn's request cycle
        wire: Any = getattr(cycle, "transport", None)
        if getattr(wire, "watch_lost", None) is not None and hasattr(cycle, "flow"):
            if cycle.disconnected:  # lost before the watch began
                self._leave()
                return
            cycle.flow.resume_reading()  # as receive() does: a closed socket is seen
            self._wire = wire
            wire.watch_lost(self._leave)
            return
        self._listener = asyncio.ensure_future(self._receive())
        self._listener.add_done_callback(self._heard)

    def _heard(self, listener: asyncio.Future[Any]) -> None:
        if self.phase is None or listener.cancelled() or listener.exception() is not None:
            return
        if listener.result().get("type") != "http.disconnect":
            self.phase = None
            return
        self._leave()

    def _leave(self) -> None:
        """The client left: noted, told, and the request's task cancelled."""
        phase = self.phase
        if phase is None:
            return
        self.phase = None
        self._wire = None
        self.left = phase
        if self._on_left is not None:
            self._on_left(phase)
        self.task.cancel()

    def stop(self) -> None:
        """Stop watching (idempotent): the answer is about to go out, or is out."""
        self.phase = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._listener is not None:
            self._listener.cancel()
            self._listener = None
        if self._wire is not None:
            self._wire.unwatch_lost(self._leave)
            self._wire = None

    def ours(self) -> bool:
        """Whether the cancellation being handled is the watch's alone (the client
        left and nothing else cancelled the task); if so it is withdrawn."""
        if self.left is None:
            return False
        return self.task.uncancel() == 0


HEARTBEAT = b": keep-alive\n\n"


class Written(Protocol):
    """What writes to a stream's client beside ``send_stream``: ``last``, the loop
    time of its last write; ``ending``, whether the chunk ``send_stream`` was just
    handed is the stream's last (it then goes out with the stream's end)."""

    @property
    def last(self) -> float: ...

    @property
    def ending(self) -> bool: ...


def _stream_head(headers: dict[str, str], media_type: bytes = SSE_TYPE) -> dict[str, Any]:
    raw = _raw(headers)
    raw.append((b"content-type", media_type))
    raw.extend(SSE_HEADERS)
    return {"type": "http.response.start", "status": 200, "headers": raw}


class EarlyHead:
    """A stream's 200 head and SSE comments while its first content is slow (ADR 0020).

    Armed when a streaming request starts to be served: if no answer is there after
    ``first`` seconds, the head goes out with the headers known then (``headers()``:
    the request id and the route, not yet the target) and a comment (``HEARTBEAT``),
    and a comment again every ``first`` seconds. Nothing of this runs in the request's
    task: each send is its own future, one at a time (a beat due while one is still
    being sent is skipped). ``stop()`` ends it and says whether the head went out;
    then the stream goes on without a head of its own (``send_stream(head_sent=True)``).
    A request answered sooner costs one timer.
    """

    __slots__ = ("_send", "_headers", "_every", "_loop", "_timer", "_beat", "started",
                 "_media_type", "_heartbeat")

    def __init__(self, send: Send, headers: Callable[[], dict[str, str]],
                 first: float, *, media_type: bytes = SSE_TYPE,
                 heartbeat: bytes = HEARTBEAT) -> None:
        self._send = send
        self._headers = headers
        self._media_type = media_type
        self._heartbeat = heartbeat
        self._every = first
        self._loop = asyncio.get_running_loop()
        self._beat: asyncio.Future[None] | None = None
        self.started = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(first, self._pulse)

    def _pulse(self) -> None:
        if not self.started:
            self.started = True
            self._beat = asyncio.ensure_future(
                self._open(_stream_head(self._headers(), self._media_type)))
        elif self._beat is None or self._beat.done():
            if self._beat is not None and not self._beat.cancelled() \
                    and self._beat.exception() is not None:
                self._timer = None
                return  # the client's connection failed: stop() raises it
            self._beat = asyncio.ensure_future(self._send(
                {"type": "http.response.body", "body": self._heartbeat, "more_body": True}))
        self._timer = self._loop.call_later(self._every, self._pulse)

    async def _open(self, head: dict[str, Any]) -> None:
        await self._send(head)
        await self._send({"type": "http.response.body", "body": self._heartbeat,
                          "more_body": True})

    async def stop(self) -> bool:
        """No more comments; the one being sent is waited for (its failure raised).
        True if the head went out."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        beat, self._beat = self._beat, None
        if beat is not None:
            await beat
        return self.started

    def cancel(self) -> None:
        """Stop at once, without waiting (the request is being cancelled)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        beat, self._beat = self._beat, None
        if beat is not None:
            if beat.done() and not beat.cancelled():
                beat.exception()  # retrieved: the request is ending anyway
            beat.cancel()


async def send_stream(send: Send, watch: ClientWatch | None, headers: dict[str, str],
                      chunks: AsyncIterator[bytes], heartbeat_secs: float = 0, *,
                      head_sent: bool = False, media_type: bytes = SSE_TYPE,
                      heartbeat: bytes = HEARTBEAT,
                      wire: Written | None = None,
                      on_head: Callable[[], None] | None = None) -> None:
    """A 200 event stream, one body message per chunk; ``chunks`` is closed at the end
    whether it ran out, failed or the client left. ``head_sent``: an ``EarlyHead``
    sent the head already (``headers`` are then not sent).

    ``watch`` (if any) is moved to ``relaying`` and stopped once the last message
    is sent: a client leaving mid-stream cancels this task (the caller records it).

    With ``heartbeat_secs``, every silence that long between chunks is filled with an
    SSE comment (``HEARTBEAT``, which every SSE client skips), so an idle timeout on
    the way (API Gateway's, a proxy's) never cuts a stream whose model is thinking.
    One timer runs per stream, not one per chunk: when it fires it sends a beat only if
    nothing was sent for ``heartbeat_secs`` (``last``: when the last chunk went out),
    else it waits for the rest of that silence. A beat is never sent while a chunk is.
    A stream that is not SSE (``media_type``) brings its own ``heartbeat`` bytes.

    ``wire``: chunks the relay writes directly count as sent (``UvicornWire.last``);
    ``on_head`` runs once the head is out (the relay may then be handed ``wire``)."""
    loop = asyncio.get_running_loop()
    beat: asyncio.Future[None] | None = None
    timer: asyncio.TimerHandle | None = None
    last = 0.0
    sending = False

    def pulse() -> None:
        nonlocal beat, timer
        quiet = loop.time() - (last if wire is None else max(last, wire.last))
        if quiet >= heartbeat_secs and not sending and (beat is None or beat.done()):
            beat = asyncio.ensure_future(
                send({"type": "http.response.body", "body": heartbeat, "more_body": True}))
            quiet = 0.0
        timer = loop.call_later(max(heartbeat_secs - quiet, heartbeat_secs / 16), pulse)

    if watch is not None and watch.phase is not None:
        watch.phase = "relaying"
    try:
        if not head_sent:
            await send(_stream_head(headers, media_type))
        if on_head is not None:
            on_head()
        if heartbeat_secs > 0:
            last = loop.time()
            timer = loop.call_later(heartbeat_secs, pulse)
        ended = False
        async for chunk in chunks:
            if beat is not None:
                sending = True
                await beat  # never two sends at once
                beat = None
            if wire is not None and wire.ending:
                if timer is not None:
                    timer.cancel()
                    timer = None
                # The last chunk and the end in one write. The relay then ends
                # without another chunk (one would fail in ``send``: the answer is over).
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                ended = True
                if watch is not None:
                    watch.stop()
                continue
            sending = True
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            sending = False
            if timer is not None:
                last = loop.time()
        if ended:
            return
        if timer is not None:
            timer.cancel()
            if beat is not None:
                await beat
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if watch is not None:
            watch.stop()  # the response is complete: a disconnect now is not the client's
    finally:
        if timer is not None:
            timer.cancel()
        pulse = None  # type: ignore[assignment]  # it refers to itself: freed now, not by gc
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


class UvicornWire:
    """The client's connection under uvicorn's ASGI ``send``, written to directly
    by a ``Relay`` (``executor/direct.py``; docs/decisions/0021-direct-relay.md):
    each write is one body chunk framed as uvicorn frames it (the head promised
    chunked transfer coding), through the same transport, after the head and
    the messages ``send`` wrote before. ``on_text`` learns the answer text
    written (the record's estimate, should the usage not come); ``last`` is
    when the last write went out (``send_stream``'s heartbeat counts from it).
    """

    __slots__ = ("_cycle", "_transport", "_flow", "_loop", "_on_text", "last", "writes")

    def __init__(self, cycle: Any, on_text: Callable[[int], None]) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self._flow = cycle.flow
        self._loop = asyncio.get_running_loop()
        self._on_text = on_text
        self.last = 0.0
        self.writes = 0  # reads relayed directly

    @staticmethod
    def of(send: Send, on_text: Callable[[int], None]) -> UvicornWire | None:
        """The wire under ``send`` if it is uvicorn's, its response started with
        chunked coding and not complete; else None (the ASGI path is kept)."""
        cycle = getattr(send, "__self__", None)
        if cycle is None or not hasattr(cycle, "flow") or not hasattr(cycle, "transport"):
            return None
        if getattr(cycle, "chunked_encoding", None) is not True \
                or getattr(cycle, "response_complete", True) \
                or not getattr(cycle, "response_started", False) \
                or getattr(cycle, "disconnected", True):
            return None
        return UvicornWire(cycle, on_text)

    def write(self, data: bytes, text_bytes: int) -> bool:
        self._on_text(text_bytes)
        cycle = self._cycle
        if cycle.disconnected or cycle.response_complete:
            return False  # as uvicorn's send: nothing written; the client's watch acts
        self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        self.last = self._loop.time()
        self.writes += 1
        return bool(self._flow.write_paused)

    async def drain(self) -> None:
        cycle = self._cycle
        if self._flow.write_paused and not cycle.disconnected:
            await self._flow.drain()
