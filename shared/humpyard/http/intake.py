"""The intake every client protocol shares: one request in, one answer out.

A client path (``/v1/chat/completions``, ``/v1/messages``, ``/v1/responses``)
is a ``ClientPath``: a plain ASGI app (no Starlette ``Request``/``Response``,
which are most of a request's framework cost:
docs/decisions/0003-performance.md) around a ``ClientProtocol``, the part
that differs between protocols (decoding the
body to an OpenAI chat request, encoding the answer and its stream, the
error shape). ``take`` does the rest, the same for every protocol:

1. open the request's record (``recording``) — every request leaves exactly
   one decision, however it ends;
2. read the headers, authenticate, read the body within ``max_body_bytes``;
3. decode it with the protocol, then ``flow.serve`` plans and executes it,
   while a ``ClientWatch`` (``http/reply.py``) listens for the client leaving:
   if it does — waiting for the answer, in a stream's hold-back or while the
   stream is relayed — the work is cancelled at once and recorded as 499;
4. send the answer (or the stream) encoded by the protocol, with the
   ``x-humpyard-*`` headers; an error is answered in the protocol's shape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Scope, Send

from humpyard.config.spec import Config
from humpyard.errors import HumpyardError
from humpyard.executor.direct import Relay
from humpyard.flow import serve
from humpyard.http.body import body_coding, header_dict, receive_json
from humpyard.http.errors import error_reply, internal_reply
from humpyard.http.reply import (
    HEARTBEAT,
    SSE_TYPE,
    ClientWatch,
    EarlyHead,
    Reply,
    UvicornWire,
    send_reply,
    send_stream,
)
from humpyard.keys import authenticate
from humpyard.protocols.openai import validate_chat
from humpyard.protocols.sse import SSEEvent
from humpyard.recording import INTERNAL, SERVER_STOPPED, Recording, recording, stopped
from humpyard.records import Call, Served, issued_at, new_request_id
from humpyard.services import RequestServices

log = logging.getLogger("humpyard.http")

Headers = dict[str, str]


@dataclass(frozen=True, slots=True)
class ClientProtocol:
    """What one client protocol brings to the intake.

    - ``name``: recorded as the decision's ``protocol``;
    - ``decode(body, config) -> (chat_body, notes, context)``: the request as an
      OpenAI chat body, notes on what could not be carried (``RequestError`` if
      malformed; ``config.clients`` says what client fields may pass), and
      whatever the answer needs from the original request (or None);
    - ``answer(call, context, served, headers) -> Reply``: a buffered answer;
    - ``stream(call, context, events) -> bytes``: the upstream's event batches,
      encoded; a failure after the first content ends the stream with the
      protocol's own error event (the record learns of it underneath); notes
      the encoding adds go to ``call.notes``;
    - ``errors``: the error body shape, ``"openai"``, ``"anthropic"``,
      ``"responses"`` or ``"bedrock"`` (``http/errors.error_reply``);
    - ``prepare(body, scope, headers) -> (body, headers)`` (optional): the request
      as the protocol it stands for, before ``decode`` — a protocol whose path
      carries part of the request (Bedrock's ``/model/{modelId}/invoke``) puts it
      into the body here; what it returns is what is recorded and what goes to an
      upstream speaking that protocol;
    - ``stream_type``, ``heartbeat``: a stream's content type and the bytes that
      fill its silences (an SSE comment unless the protocol is not SSE).
    """

    name: str
    decode: Callable[[Any, Config], tuple[dict[str, Any], list[str], Any]]
    answer: Callable[[Call, Any, Served, Headers], Reply]
    stream: Callable[[Call, Any, AsyncIterator[list[SSEEvent]]], AsyncIterator[bytes]]
    errors: str = "openai"
    prepare: Callable[[Any, Scope, Headers], tuple[Any, Headers]] | None = None
    stream_type: bytes = SSE_TYPE
    heartbeat: bytes = HEARTBEAT


def route_headers(call: Call, served: Served | None) -> Headers:
    """The x-humpyard-* response headers for what is known so far.

    Every value is a name from the configuration or the gateway's own (never a
    model name the client sent: an unknown model gets no route header)."""
    h = {"x-humpyard-request-id": call.request_id}
    plan = call.plan
    if plan is not None and plan.route in call.config.routes:
        h["x-humpyard-route"] = plan.route
        h["x-humpyard-rule"] = plan.rule
    if served is not None:
        h["x-humpyard-target"] = served.target
        h["x-humpyard-provider"] = served.endpoint.provider
    if call.limit_headers:  # a key with rpm/tpm limits (allowance.py)
        h.update(call.limit_headers)
    return h


async def take(gw: RequestServices, protocol: ClientProtocol, scope: Scope, receive: Receive,
               send: Send) -> None:
    """Serve one client request end to end; see the module docstring. ``gw`` is the
    gateway's request side (``services.RequestServices``), never the Gateway."""
    state = scope.get("state")
    now = gw.clock.now()
    rid = (state.get("humpyard_request_id") if state else None) or new_request_id(now)
    call = Call(request_id=rid, config=gw.config, key=None, headers={}, body={},
                protocol=protocol.name, ts=issued_at(rid, now))
    watch: ClientWatch | None = None
    rec: Recording | None = None
    early: EarlyHead | None = None
    context: Any = None  # the protocol's, once the request is decoded
    try:
        async with recording(gw, call) as rec:
            call.headers = header_dict(scope["headers"])
            call.key = authenticate(call.config.keys, call.headers)
            body = await receive_json(receive, call.headers.get("content-length"),
                                      call.config.max_body_bytes,
                                      body_coding(call.headers.get("content-encoding"),
                                                  call.headers.get("transfer-encoding")))
            if protocol.prepare is not None:
                body, call.headers = protocol.prepare(body, scope, call.headers)
            if isinstance(body, dict):
                call.body = body  # what the record shows if decoding fails
            call.original = body  # for an upstream that speaks the client's protocol
            chat_body, call.notes, context = protocol.decode(body, call.config)
            call.body = validate_chat(chat_body)
            # From here the client may leave at any time: the watch cancels the work.
            stream = bool(call.body.get("stream"))
            watch = ClientWatch(receive, "hold_back" if stream else "waiting",
                                rec.client_left)
            first = call.config.router.stream_first_heartbeat_secs
            early = EarlyHead(send, lambda: route_headers(call, None), first,
                              media_type=protocol.stream_type,
                              heartbeat=protocol.heartbeat) if stream and first > 0 else None
            try:
                try:
                    served = await serve(gw, call)
                except Exception as e:
                    if early is None or not await early.stop():
                        raise
                    # The head went out early: the failure ends the stream instead.
                    rec.replying = True
                    return await _fail_started_stream(rec, protocol, call, context, send, e)
                head_sent = False
                if early is not None:
                    try:
                        head_sent = await early.stop()
                    except BaseException:  # the client's connection failed under a comment
                        rec.replying = True  # the head may be out: nothing more to answer
                        await served.aclose()
                        raise
                headers = route_headers(call, served)
                if served.events is not None:
                    events = rec.watch(served)
                    rec.replying = True
                    direct = _direct_relay(gw, protocol, call, served, rec, send)
                    try:
                        return await send_stream(send, watch, headers,
                                                 protocol.stream(call, context, events),
                                                 call.config.stream_heartbeat_secs,
                                                 head_sent=head_sent,
                                                 media_type=protocol.stream_type,
                                                 heartbeat=protocol.heartbeat,
                                                 wire=direct,
                                                 on_head=direct.start if direct else None)
                    finally:  # however the stream ended: the upstream released, the record told
                        await events.aclose()
                        if direct is not None:
                            writes = direct.end()
                            if writes:
                                gw.metrics.direct_writes.inc(writes, protocol=protocol.name)
            finally:
                if early is not None:
                    early.cancel()
                watch.stop()  # before any answer goes out (its end reads as a disconnect)
            rec.answered(served)
            reply = protocol.answer(call, context, served, headers)
            if gw.record_before_reply:  # the instance may freeze once the answer is out
                rec.close(status=200)
            rec.replying = True
            await send_reply(send, reply)
    except asyncio.CancelledError as e:
        if watch is not None and watch.ours():
            return  # the client left: recorded (499), nobody to answer
        if not stopped(e):
            raise
        # The server stopped it (recorded as 503): the client is told, and the request
        # ends here rather than as uvicorn's 500 and a trace in the log.
        started = (rec is not None and rec.replying) or (early is not None and early.started)
        await _answer_stopped(send, protocol, call, context, started)
    except HumpyardError as e:
        if rec is not None and rec.replying:
            raise
        await send_reply(send, error_reply(e, shape=protocol.errors,
                                           headers=route_headers(call, None)))
    except Exception as e:  # noqa: BLE001 - answered as a 500, logged with its trace
        if rec is not None and rec.replying:
            raise  # the answer is out (or the client gone): nothing more to send
        await send_reply(send, internal_reply(e, shape=protocol.errors,
                                              headers={"x-humpyard-request-id": rid}))


async def _answer_stopped(send: Send, protocol: ClientProtocol, call: Call, context: Any,
                          started: bool) -> None:
    """The 503 of a request the server stopped, in the protocol's shape; or, once its
    stream began, the protocol's own error event and the stream's end, as for a
    stream whose upstream broke (only whole events are ever written, so the event
    starts on a boundary). The stream used to just end: the SDKs took the cut
    answer for a whole one."""
    try:
        if not started:
            await send_reply(send, error_reply(SERVER_STOPPED, shape=protocol.errors, headers={
                "x-humpyard-request-id": call.request_id}))
            return
        # raised in ``_failing``: a copy of its own, so no shared error holds the
        # frames (and the cancellation, as its context) of the requests it ended
        stop = HumpyardError(SERVER_STOPPED.message, status=SERVER_STOPPED.status,
                             code=SERVER_STOPPED.code)
        async for data in protocol.stream(call, context, _failing(stop)):
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:  # noqa: BLE001 - the connection went with the server: nothing to tell
        pass


async def _failing(error: HumpyardError) -> AsyncIterator[list[SSEEvent]]:
    """Upstream events that fail at once with ``error``: a protocol's ``stream`` given
    them ends with its own error event."""
    raise error
    yield []  # an async generator that fails on its first step


class _Direct:
    """The direct relay for one stream, once its head is out (``start``)."""

    __slots__ = ("relay", "rec", "send", "wire")

    def __init__(self, relay: Relay, rec: Recording, send: Send) -> None:
        self.relay, self.rec, self.send = relay, rec, send
        self.wire: UvicornWire | None = None

    @property
    def last(self) -> float:
        """When the direct relay last wrote to the client (``send_stream``'s heartbeat)."""
        return self.wire.last if self.wire is not None else 0.0

    @property
    def ending(self) -> bool:
        """The relay's batch just passed on is its last (``Relay.last``): the
        client's protocol passes batches on one for one (``_direct_relay``), so
        the chunk ``send_stream`` holds is the stream's last."""
        return self.relay.last

    def _count(self, n: int) -> None:
        self.rec.relayed += n

    def start(self) -> None:
        self.wire = self.relay.wire = UvicornWire.of(self.send, self._count)

    def end(self) -> int:
        """The stream is over: the reads written directly. The wire is let go, so the
        relay, the wire and this object (which refer to each other) are freed at
        once rather than by the garbage collector."""
        wire, self.wire = self.wire, None
        self.relay.wire = None
        return wire.writes if wire is not None else 0


def _direct_relay(gw: RequestServices, protocol: ClientProtocol, call: Call, served: Served,
                  rec: Recording, send: Send) -> _Direct | None:
    """A direct relay (docs/decisions/0021-direct-relay.md) when the client's
    protocol passes the upstream's events on unchanged (a chat client, or an
    Anthropic client of an Anthropic-native upstream), the configuration allows
    it and the record is not written before the reply (Lambda); the relay
    itself decides which reads it may pass (``executor/direct.py``)."""
    relay = served.events
    if not isinstance(relay, Relay) or not call.config.direct_relay or gw.record_before_reply:
        return None
    if protocol.name == "openai" or (protocol.name == "anthropic" and call.native == "anthropic"
                                     and served.native == "anthropic"):
        return _Direct(relay, rec, send)
    return None


async def _fail_started_stream(rec: Recording, protocol: ClientProtocol, call: Call,
                               context: Any, send: Send, error: Exception) -> None:
    """Every target failed after an ``EarlyHead`` sent the 200 head: the record is
    closed with the real status, then the stream ends with the protocol's own
    error event (as a break after the first content does)."""
    if isinstance(error, HumpyardError):
        failure = error
    else:
        log.error("request failed after its stream's head request_id=%s",
                  call.request_id, exc_info=error)
        failure = INTERNAL
    rec.close(status=failure.status, error=failure)
    try:
        await send_stream(send, None, {}, protocol.stream(call, context, _failing(failure)),
                          head_sent=True, media_type=protocol.stream_type,
                          heartbeat=protocol.heartbeat)
    finally:
        # Told to the record and the stream: the failure's traceback holds this
        # request's frames, which hold the failure (here, in ``_failing``'s frame):
        # let it go, or each such request waits for the garbage collector.
        error.__traceback__ = failure.__traceback__ = None


class ClientPath:
    """A client path as a plain ASGI app serving ``protocol``; the gateway is the app's,
    and a request is given its request side (``RequestServices``) as it arrives."""

    def __init__(self, protocol: ClientProtocol):
        self.protocol = protocol

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await take(scope["app"].state.gateway.services, self.protocol, scope, receive, send)
