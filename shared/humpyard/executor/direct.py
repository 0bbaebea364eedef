"""The direct relay (docs/decisions/0021-direct-relay.md): an upstream's reads
that need nothing of the relay go to the client's connection inside the
upstream connection's ``data_received``.

A server that can write to the client's connection directly (``http/reply.py``'s
``UvicornWire``) hands the stream's ``Relay`` a ``DirectWire``; the relays of
``executor/stream.py`` then call ``direct`` for each stretch between the reads
they must see themselves (the usage, an error, the end). With ``raw``, a read
that is whole one-line ``data:`` events naming neither usage nor an error is
written as it came, undecoded (a chat client of an OpenAI-style upstream).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol

from humpyard.executor.events import Events
from humpyard.planning.estimate import relayed_text_bytes, relayed_text_bytes_raw
from humpyard.protocols.sse import SSEEvent
from humpyard.upstream.body import Body
from humpyard.upstream.connection import SINK_GO, SINK_PAUSE, SINK_STOP
from humpyard.upstream.errors import EventTooLarge


class DirectWire(Protocol):
    """The client's connection, written to directly (``http/reply.py``'s ``UvicornWire``)."""

    def write(self, data: bytes, text_bytes: int) -> bool:
        """Send ``data`` (whole events, ``text_bytes`` of answer text); True when the
        client's buffer is over its high-water mark."""

    async def drain(self) -> None: ...


class Relay:
    """A relayed stream's batches (an async iterator), which a server that can
    write to the client's connection directly may hand a ``DirectWire``
    (``wire``) before iterating: the reads that need nothing of the relay but
    passing on then go from the upstream's connection to the client's in the
    connection's callback, and this iterator only yields what does (the usage,
    an error, the end). docs/decisions/0021-direct-relay.md.

    ``last`` turns True as the relay yields its last batch: the upstream's answer
    is all in and taken, and the relay ends without another (its end, an error
    included, is decided by then). A server may then send that batch with the
    stream's end, in one write."""

    __slots__ = ("gen", "wire", "last")

    def __init__(self) -> None:
        self.gen: AsyncGenerator[list[SSEEvent], None] | None = None
        self.wire: DirectWire | None = None
        self.last = False

    def __aiter__(self) -> Relay:
        return self

    def __anext__(self) -> Awaitable[list[SSEEvent]]:
        assert self.gen is not None
        return self.gen.__anext__()

    async def aclose(self) -> None:
        if self.gen is not None:
            await self.gen.aclose()


class _Splice:
    """The sink of one direct stretch: decodes each read as the relay would and
    writes its events when ``plain`` says they need nothing else; otherwise keeps
    them (``pending``, or the limit's failure) for the relay, and stops."""

    __slots__ = ("events", "wire", "plain", "pending", "failure", "raw")

    def __init__(self, events: Events, wire: DirectWire,
                 plain: Callable[[bytes, bool, list[SSEEvent]], bool], raw: bool) -> None:
        self.events, self.wire, self.plain = events, wire, plain
        self.pending: list[SSEEvent] | None = None
        self.failure: Exception | None = None
        # A chat relay needs nothing of a read of whole data-only events that names
        # neither usage nor an error: its bytes go out as they came, undecoded.
        self.raw = raw and events.held_max is None

    def __call__(self, chunk: bytes) -> int:
        events = self.events
        if self.raw and b'"usage"' not in chunk and b'"error"' not in chunk \
                and events.decoder.passes(chunk):
            try:
                paused = self.wire.write(chunk, relayed_text_bytes_raw(chunk))
            except Exception as e:  # noqa: BLE001 - as below
                self.failure = e
                return SINK_STOP
            return SINK_PAUSE if paused else SINK_GO
        whole = events.decoder.idle
        try:
            evs = events.feed(chunk)
        except EventTooLarge as e:
            self.failure = e
            return SINK_STOP
        if not evs:
            return SINK_GO
        if not self.plain(chunk, whole, evs):
            self.pending = evs
            return SINK_STOP
        out = evs[0].wire if len(evs) == 1 else b"".join(ev.wire for ev in evs)
        text = 0
        for ev in evs:
            text += relayed_text_bytes(ev.data)
        try:
            return SINK_PAUSE if self.wire.write(out, text) else SINK_GO
        except Exception as e:  # noqa: BLE001 - the client's transport failed: the
            self.failure = e  # relay ends the stream as a failed send would
            return SINK_STOP


async def direct(events: Events, wire: DirectWire,
                 plain: Callable[[bytes, bool, list[SSEEvent]], bool], *,
                 raw: bool = False) -> list[SSEEvent]:
    """One direct stretch (``Relay``); the events it kept for the relay. Nothing
    happens unless the body is the connection's own (no content coding).
    ``plain`` says which decoded reads need nothing of the relay; ``raw`` lets a
    read ``plain_chat`` would pass go out undecoded (``_Splice``)."""
    body = events.raw
    if type(events) is not Events or not isinstance(body, Body):
        return []  # a coded body, or not SSE (Bedrock's event stream): the relay reads it
    splice = _Splice(events, wire, plain, raw)
    await body.splice(splice, wire.drain)
    if splice.failure is not None:
        raise splice.failure
    return splice.pending or []


def plain_chat(chunk: bytes, whole: bool, evs: list[SSEEvent]) -> bool:
    """A chat stream's read needs nothing of the relay: no usage, no error."""
    if whole and b'"usage"' not in chunk and b'"error"' not in chunk:
        return True
    return not any('"usage"' in ev.data or '"error"' in ev.data for ev in evs)
