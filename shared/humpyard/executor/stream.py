"""Stream hold-back: nothing reaches the client before the first content.

``hold_back`` reads the upstream's SSE until the first event that carries
content (text, a tool-call delta, or reasoning text) or until the stream ends,
so that a failure before that point can still fail over and the client sees
a real status. It returns the events read so far followed by the rest of the
stream as one async iterator of ``SSEEvent``. After the first content
nothing fails over: a later break ends the client's stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from humpyard.errors import UpstreamError
from humpyard.protocols.sse import SSEDecoder, SSEEvent
from humpyard.redact import redact
from humpyard.upstream.client import UpstreamResponse


@dataclass
class HeldStream:
    """The outcome of holding back: ``error`` set means fail over instead."""

    events: AsyncIterator[list[SSEEvent]] | None = None  # batches, one per upstream read
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


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


async def hold_back(resp: UpstreamResponse, wanted_usage: bool = True,
                    secrets: Sequence[str | None] = ()) -> HeldStream:
    """Read until first content; return the held events plus the rest, or an error.

    No error message, here or raised by the relayed rest, contains one of
    ``secrets`` (the provider's key, which some upstreams quote in errors)."""
    decoder = SSEDecoder()
    held: list[SSEEvent] = []
    usage: dict[str, int] = {}
    raw = resp.iter_raw()
    content = False
    ended = False
    async for chunk in raw:
        for ev in decoder.feed(chunk):
            if ev.data == "[DONE]":
                held.append(ev)
                ended = True
                continue
            try:
                obj = json.loads(ev.data)
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
    return HeldStream(events=_relay(held, raw, decoder, usage, wanted_usage, secrets),
                      usage=usage)


def _finished(ev: SSEEvent) -> bool:
    return '"finish_reason":"' in ev.data.replace(" ", "") or ev.data == "[DONE]"


async def _relay(held: list[SSEEvent], raw: AsyncIterator[bytes], decoder: SSEDecoder,
                 usage: dict[str, int], wanted_usage: bool,
                 secrets: Sequence[str | None] = ()) -> AsyncIterator[list[SSEEvent]]:
    """The held events as one batch, then one batch per upstream read (so the
    client gets one write where the upstream sent one). An upstream error event
    after the first content raises ``UpstreamError`` (code ``stream_broken``)
    after the events before it in the same read."""
    if held:
        yield held
    async for chunk in raw:
        batch: list[SSEEvent] = []
        for ev in decoder.feed(chunk):
            if '"usage"' in ev.data or '"error"' in ev.data:
                try:
                    obj = json.loads(ev.data)
                except ValueError:
                    obj = None
                if isinstance(obj, dict):
                    if "error" in obj and not obj.get("choices"):
                        if batch:
                            yield batch
                        err = obj["error"]
                        msg = err.get("message") if isinstance(err, dict) else str(err)
                        raise UpstreamError(redact(f"upstream stream error: {msg}", secrets),
                                            status=502, code="stream_broken")
                    _usage_of(obj, usage)
                    if not wanted_usage and not obj.get("choices"):
                        continue
            batch.append(ev)
        if batch:
            yield batch
