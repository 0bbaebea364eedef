"""Misbehaviour the shared ``tests.support.steps`` do not script, for the fault drills.

Each is a ``Step`` a ``FakeUpstream`` plays for one request. Where a step
waits, it waits a bounded time (``hold``) and then drops the connection, so a
soak that plays thousands of them never piles up sockets on the upstream side.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from humpyard.protocols import sse
from humpyard.simulate.wire import completion_body, usage_dict
from tests.support.steps import CREATED, Exchange, Step


def _completion(ex: Exchange, text: str = "hello") -> bytes:
    b = ex.chunks()
    return json.dumps(completion_body(id=b.id, model=b.model, created=CREATED,
                                      usage=usage_dict(10, 1), text=text)).encode()


@dataclass(frozen=True)
class ResetMidBody(Step):
    """Buffered: the head and half the body, then a TCP RST. Streamed: the role chunk
    and ``chunks`` of content, then a TCP RST."""

    chunks: tuple[str, ...] = ("partial ",)

    async def respond(self, ex: Exchange) -> bool:
        if ex.stream:
            b = ex.chunks()
            await ex.start_stream()
            await ex.event(b.role())
            for piece in self.chunks:
                await ex.event(b.content(piece))
        else:
            body = _completion(ex)
            await ex.send_head(200, {"content-type": "application/json",
                                     "content-length": str(len(body))})
            await ex.write(body[: len(body) // 2])
        ex.drop(hard=True)
        return False


@dataclass(frozen=True)
class StallAfter(Step):
    """Streamed: 200 and the role chunk (``content=False``) or a content chunk too,
    then silence for ``hold`` seconds, then a dropped connection."""

    content: bool = False
    hold: float = 30.0

    async def respond(self, ex: Exchange) -> bool:
        b = ex.chunks()
        await ex.start_stream()
        await ex.event(b.role())
        if self.content:
            await ex.event(b.content("partial "))
        await asyncio.sleep(self.hold)
        ex.drop()
        return False


@dataclass(frozen=True)
class Slowloris(Step):
    """The head at once, then the answer one byte every ``interval`` seconds.

    Buffered: a ``Content-Length`` body; streamed: a chunked SSE body whose
    first content event takes ``len(event) * interval`` to arrive. Stops
    when the peer goes away (a write fails) or after ``limit`` bytes.
    """

    interval: float = 0.1
    limit: int = 10_000

    async def respond(self, ex: Exchange) -> bool:
        if ex.stream:
            b = ex.chunks()
            await ex.start_stream()
            body = sse.encode(json.dumps(b.content("slow"))) + sse.DONE
        else:
            body = _completion(ex, "slow")
            await ex.send_head(200, {"content-type": "application/json",
                                     "content-length": str(len(body))})
        for i in range(min(len(body), self.limit)):
            await asyncio.sleep(self.interval)
            piece = body[i:i + 1]
            if ex.stream:
                await ex.send_chunk(piece)
            else:
                await ex.write(piece)
        ex.drop()
        return False


@dataclass(frozen=True)
class Raw200(Step):
    """A 200 with exactly ``body`` (correct framing) and ``content_type``."""

    body: bytes
    content_type: str = "application/json"

    async def respond(self, ex: Exchange) -> bool:
        await ex.send(200, self.body, self.content_type)
        return True


@dataclass(frozen=True)
class RawStream(Step):
    """A 200 SSE stream of these exact byte chunks, cleanly ended."""

    parts: tuple[bytes, ...]

    async def respond(self, ex: Exchange) -> bool:
        await ex.start_stream()
        for part in self.parts:
            await ex.send_chunk(part)
        await ex.end_stream()
        return True


@dataclass(frozen=True)
class Hold(Step):
    """Read the request, say nothing for ``seconds``, then close (a bounded stall)."""

    seconds: float

    async def respond(self, ex: Exchange) -> bool:
        await asyncio.sleep(self.seconds)
        ex.drop()
        return False


class Mixed(Step):
    """Each request plays one of ``steps``, drawn with ``weights`` from a seeded source."""

    def __init__(self, steps: Sequence[Step], weights: Sequence[float], seed: int = 7):
        self.steps = list(steps)
        self.weights = list(weights)
        self.rng = random.Random(seed)

    async def respond(self, ex: Exchange) -> bool:
        step = self.rng.choices(self.steps, self.weights)[0]
        return await step.respond(ex)


def truncated_json() -> Raw200:
    """A 200 whose (correctly framed) JSON body stops half-way."""
    return Raw200(b'{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"mes')


def error_object_200(message: str = "model overloaded, try later") -> Raw200:
    """A 200 whose body is an error object, not a completion."""
    return Raw200(json.dumps({"error": {"message": message, "type": "server_error"}}).encode())


def invalid_sse() -> RawStream:
    """A 200 event stream whose first event is not JSON."""
    return RawStream((b"data: {this is not json\n\n", b"data: [DONE]\n\n"))


def garbage_after_content() -> RawStream:
    """Content first, then an event that is not JSON, then the end."""
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": CREATED, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "fine "},
                          "finish_reason": None}]}
    return RawStream((sse.encode(json.dumps(chunk)), b"data: {broken\n\n", sse.DONE))


__all__ = ["Hold", "Mixed", "Raw200", "RawStream", "ResetMidBody", "Slowloris", "StallAfter",
           "error_object_200", "garbage_after_content", "invalid_sse", "truncated_json"]
