"""Stream hold-back: nothing reaches the client before the first content.

``hold_back`` reads the upstream's SSE until the first event that carries
content (text, a tool-call delta, or reasoning text) or until the stream ends,
so that a failure before that point can still fail over and the client sees
a real status. It returns the events read so far followed by the rest of the
stream as one async iterator of ``SSEEvent``. After the first content
nothing fails over: a later break ends the client's stream.

``hold_back_anthropic`` does the same for an Anthropic Messages stream: the
first content is the first ``content_block_delta`` or a tool-use block's
start; an ``error`` event before it fails over. Its events are relayed as
they came (to a client that speaks Anthropic Messages too) or translated
into chat chunks by a ``ChunkTranslator``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field

from humpyard import jsonfast
from humpyard.config.spec import AnswerLimits
from humpyard.errors import UpstreamError
from humpyard.executor.direct import Relay, direct, plain_chat
from humpyard.executor.events import Events
from humpyard.protocols.anthropic_upstream import chat_usage
from humpyard.protocols.anthropic_upstream_stream import ChunkTranslator
from humpyard.protocols.sse import DONE, SSEEvent
from humpyard.redact import redact
from humpyard.upstream.body import complete, rest_of_read
from humpyard.upstream.classify import Classification
from humpyard.upstream.response import UpstreamResponse

DEFAULT_LIMITS = AnswerLimits()


@dataclass
class HeldStream:
    """The outcome of holding back: ``error`` set means fail over instead."""

    events: AsyncIterator[list[SSEEvent]] | None = None  # batches, one per upstream read
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    classification: Classification | None = None  # the error's, when not a plain 502
    status: int = 502  # the error's status (a Bedrock exception frame's: its type's)


def _has_content(obj: dict) -> bool:
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content") \
                or delta.get("reasoning") or delta.get("function_call"):
            return True
    return False


def _usage_of(obj: dict, into: dict[str, int]) -> None:
    u = obj.get("usage")
    if isinstance(u, dict):
        into.clear()
        into.update({k: v for k, v in u.items() if isinstance(v, int)})
        details = u.get("prompt_tokens_details")
        if isinstance(details, dict):  # cache counts, flattened (ledger/decision.py)
            for theirs, ours in (("cached_tokens", "cache_read_input_tokens"),
                                 ("cache_write_tokens", "cache_creation_input_tokens")):
                if isinstance(details.get(theirs), int):
                    into.setdefault(ours, details[theirs])


async def hold_back(resp: UpstreamResponse, wanted_usage: bool = True,
                    secrets: Sequence[str | None] = (),
                    limits: AnswerLimits = DEFAULT_LIMITS) -> HeldStream:
    """Read until first content; return the held events plus the rest, or an error.

    No error message, here or raised by the relayed rest, contains one of
    ``secrets`` (the provider's key, which some upstreams quote in errors).
    A stream past ``limits`` raises (``Events``)."""
    events = Events(resp, limits)
    held: list[SSEEvent] = []
    usage: dict[str, int] = {}
    raw = events.raw
    content = False
    ended = False
    async for chunk in raw:
        for ev in events.feed(chunk):
            if ev.data == "[DONE]":
                held.append(ev)
                ended = True
                continue
            try:
                obj = jsonfast.loads(ev.data)
            except ValueError:
                return HeldStream(error=redact(f"upstream sent an invalid stream event: "
                                               f"{ev.data[:200]!r}", secrets))
            if not isinstance(obj, dict):
                return HeldStream(error="upstream sent a stream event that is not an object")
            if "error" in obj and not obj.get("choices"):
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else str(err)
                return HeldStream(error=redact(f"upstream stream error: {msg}", secrets))
            _usage_of(obj, usage)
            if not wanted_usage and not obj.get("choices") and "usage" in obj:
                continue
            held.append(ev)
            content = content or _has_content(obj)
        if content or ended:
            break
    if not content and not ended:
        # The stream closed cleanly without content or [DONE]: an empty answer
        # is still an answer only if the upstream said it finished.
        if not any(_finished(e) for e in held):
            return HeldStream(error="upstream closed the stream before any content")
    events.relaying()
    relay = Relay()
    relay.gen = _relay(held, events, usage, wanted_usage, secrets, relay)
    return HeldStream(events=relay, usage=usage)


def _finished(ev: SSEEvent) -> bool:
    return '"finish_reason":"' in ev.data.replace(" ", "") or ev.data == "[DONE]"


async def _relay(held: list[SSEEvent], events: Events,
                 usage: dict[str, int], wanted_usage: bool,
                 secrets: Sequence[str | None] = (),
                 relay: Relay | None = None) -> AsyncGenerator[list[SSEEvent], None]:
    """The held events with the rest of their read as one batch, then one batch per
    upstream read (so the client gets one write where the upstream sent one). An
    upstream error event after the first content raises ``UpstreamError`` (code
    ``stream_broken``) after the events before it in the same read. With a
    ``DirectWire`` (``Relay``), plain reads go to the client directly in between;
    ``Relay.last`` is set as the last batch goes."""
    decoder = events.decoder
    raw = events.raw
    first: list[SSEEvent] | None = held or None  # out with the rest of its read
    while True:
        pending: list[SSEEvent] | None = None
        if first is None and relay is not None and relay.wire is not None:
            pending = await direct(events, relay.wire, plain_chat, raw=True)  # never usage
        if pending:
            whole, chunk, evs = False, b"", pending
        else:
            if first is not None:
                chunk = rest_of_read(raw)
            else:
                try:
                    chunk = await raw.__anext__()
                except StopAsyncIteration:
                    break
                chunk += rest_of_read(raw)
            whole = decoder.idle  # this read's events start in it: its bytes say what they hold
            try:
                evs = events.feed(chunk) if chunk else []
            except Exception:
                if first is not None:  # past a limit: what came before goes out first
                    yield first
                raise
        if whole and b'"usage"' not in chunk and b'"error"' not in chunk:
            batch, failure = evs, None  # nothing to read in them: relayed as they are
        else:
            batch, failure = _chat_read(evs, usage, wanted_usage, secrets)
        if first is not None:
            batch, first = first + batch, None
        if batch:
            if failure is None and relay is not None and complete(raw):
                relay.last = True
            yield batch
        if failure is not None:
            raise failure


def _chat_read(evs: list[SSEEvent], usage: dict[str, int], wanted_usage: bool,
               secrets: Sequence[str | None]) -> tuple[list[SSEEvent], UpstreamError | None]:
    """One read's events that name usage or an error: what to pass on (the usage
    noted in ``usage``; a usage-only chunk dropped unless ``wanted_usage``), and the
    break an error event makes (the events before it are passed on)."""
    batch: list[SSEEvent] = []
    for ev in evs:
        if '"usage"' in ev.data or '"error"' in ev.data:
            try:
                obj = jsonfast.loads(ev.data)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                if "error" in obj and not obj.get("choices"):
                    err = obj["error"]
                    msg = err.get("message") if isinstance(err, dict) else str(err)
                    return batch, UpstreamError(redact(f"upstream stream error: {msg}", secrets),
                                                status=502, code="stream_broken")
                _usage_of(obj, usage)
                if not wanted_usage and not obj.get("choices"):
                    continue
        batch.append(ev)
    return batch, None


# -- Anthropic Messages streams ------------------------------------------------------

_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use"})
_DONE_EVENT = SSEEvent(data="[DONE]", wire=DONE)
NO_MESSAGE_STOP = "the upstream's stream ended without message_stop; the answer is incomplete"


class _Broken(Exception):
    """The upstream's stream said it failed (an ``error`` event) or is unreadable;
    ``classification`` when the failure has a type of its own (Bedrock's exceptions)."""

    def __init__(self, message: str, classification: Classification | None = None,
                 status: int = 502, error_type: str | None = None):
        super().__init__(message)
        self.classification = classification
        self.status = status
        self.error_type = error_type  # an Anthropic error event's own ``error.type``


class _AnthropicEvents:
    """Reads an Anthropic event stream: content seen, usage, the end, failures.

    ``take(events, out)`` appends to ``out`` what to pass on for a batch of
    upstream events: the events themselves (``translator`` None), or their
    chat chunks as events (``data: [DONE]`` after ``message_stop``); it
    raises ``_Broken`` after appending what came before the failure. ``usage`` is updated in
    place as chat usage (``anthropic_upstream.chat_usage``, integers only).
    """

    __slots__ = ("translator", "wanted_usage", "secrets", "usage", "_raw_usage", "content",
                 "ended")

    def __init__(self, translator: ChunkTranslator | None, wanted_usage: bool,
                 secrets: Sequence[str | None]) -> None:
        self.translator = translator
        self.wanted_usage = wanted_usage
        self.secrets = secrets
        self.usage: dict[str, int] = {}
        self._raw_usage: dict[str, object] = {}
        self.content = False
        self.ended = False

    def take(self, events: list[SSEEvent], out: list[SSEEvent]) -> None:
        for ev in events:
            try:
                data = json.loads(ev.data)
            except ValueError:
                raise _Broken(redact(f"upstream sent an invalid stream event: "
                                     f"{ev.data[:200]!r}", self.secrets)) from None
            if not isinstance(data, dict):
                raise _Broken("upstream sent a stream event that is not an object")
            kind = data.get("type") or ev.event
            if kind == "error":
                err = data.get("error")
                msg = err.get("message") if isinstance(err, dict) else err
                kind_of = err.get("type") if isinstance(err, dict) else None
                raise _Broken(redact(f"upstream stream error: {msg}", self.secrets),
                              error_type=kind_of if isinstance(kind_of, str) else None)
            self._note(kind, data)
            if self.translator is None:
                out.append(ev)
                continue
            for chunk in self.translator.feed(ev.event, data):
                if not self.wanted_usage and not chunk.get("choices") and "usage" in chunk:
                    continue
                text = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
                out.append(SSEEvent(data=text, wire=b"data: " + text.encode() + b"\n\n"))
            if kind == "message_stop":
                out.append(_DONE_EVENT)

    def _note(self, kind: object, data: dict) -> None:
        if kind == "content_block_delta":
            self.content = True
        elif kind == "content_block_start":
            block = data.get("content_block")
            if isinstance(block, dict) and (block.get("type") in _TOOL_BLOCKS
                                            or block.get("text")):
                self.content = True
        elif kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                self._raw_usage.update(message["usage"])
                self._usage_changed()
        elif kind == "message_delta":
            if isinstance(data.get("usage"), dict):
                # cumulative counts: non-null ones replace message_start's
                self._raw_usage.update({k: v for k, v in data["usage"].items()
                                        if v is not None})
                self._usage_changed()
        elif kind == "message_stop":
            self.ended = True

    def _usage_changed(self) -> None:
        self.usage.clear()
        self.usage.update({k: v for k, v in chat_usage(self._raw_usage).items()
                           if isinstance(v, int)})


async def hold_back_anthropic(resp: UpstreamResponse, wanted_usage: bool = True,
                              secrets: Sequence[str | None] = (),
                              translator: ChunkTranslator | None = None,
                              limits: AnswerLimits = DEFAULT_LIMITS,
                              events: Events | None = None) -> HeldStream:
    """``hold_back`` for an Anthropic Messages stream (see the module docstring).

    With ``translator`` the events come out as chat chunks; without, as they
    came. After the first content, an ``error`` event, or an end without
    ``message_stop``, raises ``UpstreamError`` (code ``stream_broken``) from
    the relayed rest. ``events`` reads the body when it is not SSE (Bedrock's
    event stream: ``executor/bedrock.py``)."""
    events = events or Events(resp, limits)
    reader = _AnthropicEvents(translator, wanted_usage, secrets)
    held: list[SSEEvent] = []
    raw = events.raw
    try:
        async for chunk in raw:
            reader.take(events.feed(chunk), held)
            if reader.content or reader.ended:
                break
    except _Broken as e:
        return HeldStream(error=str(e), classification=e.classification, status=e.status)
    if not reader.content and not reader.ended:
        return HeldStream(error="upstream closed the stream before any content")
    events.relaying()
    relay = Relay()
    relay.gen = _relay_anthropic(held, events, reader, relay)
    return HeldStream(events=relay, usage=reader.usage)


_ANTHROPIC_MARKS = ("usage", "error", "message_st")
_ANTHROPIC_NAMES = frozenset({"error", "message_start", "message_stop"})


def _plain_anthropic(chunk: bytes, whole: bool, evs: list[SSEEvent]) -> bool:
    """Events an Anthropic relay passes on and learns nothing from: objects that
    are neither an error, usage, nor the start or end of the message."""
    for ev in evs:
        data = ev.data
        if ev.event in _ANTHROPIC_NAMES or any(m in data for m in _ANTHROPIC_MARKS):
            return False
        try:
            if not isinstance(json.loads(ev.data), dict):
                return False
        except ValueError:
            return False
    return True


async def _relay_anthropic(held: list[SSEEvent], events: Events,
                           reader: _AnthropicEvents,
                           relay: Relay | None = None) -> AsyncGenerator[list[SSEEvent], None]:
    raw = events.raw
    first: list[SSEEvent] | None = held or None  # out with the rest of its read
    while True:
        pending: list[SSEEvent] | None = None
        if first is None and relay is not None and relay.wire is not None \
                and reader.translator is None:
            pending = await direct(events, relay.wire, _plain_anthropic)
        if pending:
            evs = pending
        elif first is not None:
            rest = rest_of_read(raw)
            try:
                evs = events.feed(rest) if rest else []
            except Exception:  # a broken frame or a limit: what came before goes out first
                yield first
                raise
        else:
            try:
                chunk = await raw.__anext__()
            except StopAsyncIteration:
                break
            evs = events.feed(chunk + rest_of_read(raw))
        batch: list[SSEEvent] = first or []
        first = None
        try:
            reader.take(evs, batch)
        except _Broken as e:
            if batch:
                yield batch
            broken = UpstreamError(str(e), status=502, code="stream_broken")
            broken.upstream_type = e.error_type  # an Anthropic client is told it as sent
            raise broken from None
        if batch:
            if reader.ended and relay is not None and complete(raw):
                relay.last = True
            yield batch
    if not reader.ended:
        raise UpstreamError(NO_MESSAGE_STOP, status=502, code="stream_broken")
