"""What a ``FakeUpstream`` does with one request: scriptable steps.

Build steps with the factory functions (``ok``, ``tool_call``, ``status``,
``stream_then_fail``, ``stream_then_stall``, ``fail_before_content``,
``stream_error``, ``delay``, ``stall``, ``reset``); each is a frozen dataclass
whose ``respond`` writes to the connection and returns whether the connection
stays usable for keep-alive. Streamed answers use OpenAI's exact chunk shapes
(``humpyard.simulate.wire``) and end with ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from humpyard.protocols import sse
from humpyard.simulate.wire import (
    ChunkBuilder,
    ToolCall,
    completion_body,
    encode_event,
    split_text,
    usage_dict,
)

if TYPE_CHECKING:
    from tests.support.fake_upstream import RecordedRequest

CREATED = 1_700_000_000
DEFAULT_MODEL = "fake-model"
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}


class Exchange:
    """One request being answered; steps write their answer through it."""

    def __init__(self, request: RecordedRequest, writer: asyncio.StreamWriter, seq: int):
        self.request, self.writer, self.seq = request, writer, seq
        body = request.json if isinstance(request.json, dict) else {}
        self.stream = body.get("stream") is True
        self.include_usage = self.stream and bool(
            (body.get("stream_options") or {}).get("include_usage"))
        self.model = str(body.get("model") or DEFAULT_MODEL)

    def chunks(self, model: str | None = None) -> ChunkBuilder:
        return ChunkBuilder(id=f"chatcmpl-fake{self.seq}", model=model or self.model,
                            created=CREATED, include_usage=self.include_usage)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_head(self, code: int, defaults: Mapping[str, str],
                        extra: Mapping[str, str] | None = None) -> None:
        """The status line and headers; ``extra`` overrides ``defaults`` by name."""
        merged = {k.lower(): (k, v) for k, v in defaults.items()}
        merged.update({k.lower(): (k, v) for k, v in (extra or {}).items()})
        try:
            reason = HTTPStatus(code).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {code} {reason}", *(f"{k}: {v}" for k, v in merged.values())]
        await self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def send(self, code: int, body: bytes, content_type: str,
                   headers: Mapping[str, str] | None = None) -> None:
        defaults = {"content-type": content_type, "content-length": str(len(body))}
        await self.send_head(code, defaults, headers)
        await self.write(body)

    async def start_stream(self, headers: Mapping[str, str] | None = None) -> None:
        defaults = {"content-type": "text/event-stream", "cache-control": "no-cache",
                    "transfer-encoding": "chunked"}
        await self.send_head(200, defaults, headers)

    async def send_chunk(self, data: bytes) -> None:
        """One HTTP/1.1 chunk of a chunked body."""
        await self.write(b"%x\r\n%s\r\n" % (len(data), data))

    async def event(self, obj: dict[str, Any]) -> None:
        await self.send_chunk(encode_event(obj))

    async def end_stream(self) -> None:
        await self.write(b"0\r\n\r\n")

    def drop(self, hard: bool = False) -> None:
        """Close the connection now: a FIN, or with ``hard`` a TCP reset (RST)."""
        if hard:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


class Step:
    """Base of every step: ``respond`` answers one request (True = keep-alive)."""

    async def respond(self, ex: Exchange) -> bool:
        raise NotImplementedError


def _usage(usage: Mapping[str, int] | None, completion_tokens: int) -> dict[str, int]:
    if usage is None:
        return usage_dict(10, completion_tokens)
    out = dict(usage)
    out.setdefault("total_tokens", out.get("prompt_tokens", 0) + out.get("completion_tokens", 0))
    return out


@dataclass(frozen=True)
class Ok(Step):
    """A successful answer; streamed as one content chunk per piece of ``text``."""

    text: tuple[str, ...] = ("hello",)
    usage: Mapping[str, int] | None = None
    model: str | None = None
    headers: Mapping[str, str] | None = None
    chunk_delay: float = 0.0

    async def respond(self, ex: Exchange) -> bool:
        full = "".join(self.text)
        usage = _usage(self.usage, max(1, len(full.split())))
        builder = ex.chunks(self.model)
        if not ex.stream:
            body = completion_body(id=builder.id, model=builder.model, created=CREATED,
                                   usage=usage, text=full)
            await ex.send(200, json.dumps(body).encode(), "application/json", self.headers)
            return True
        await ex.start_stream(self.headers)
        for i, chunk in enumerate(builder.answer(usage=usage, text=full, pieces=list(self.text))):
            if i and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            await ex.event(chunk)
        await ex.send_chunk(sse.DONE)
        await ex.end_stream()
        return True


@dataclass(frozen=True)
class ToolCallAnswer(Step):
    """A tool call (``finish_reason: "tool_calls"``); arguments stream in 2+ fragments."""

    name: str = "lookup"
    arguments: str = "{}"
    call_id: str = "call_fake_1"
    usage: Mapping[str, int] | None = None
    headers: Mapping[str, str] | None = None

    async def respond(self, ex: Exchange) -> bool:
        call = ToolCall(self.call_id, self.name, self.arguments)
        usage = _usage(self.usage, max(1, len(self.arguments) // 4))
        builder = ex.chunks()
        if not ex.stream:
            body = completion_body(id=builder.id, model=builder.model, created=CREATED,
                                   usage=usage, tool_call=call)
            await ex.send(200, json.dumps(body).encode(), "application/json", self.headers)
            return True
        await ex.start_stream(self.headers)
        for chunk in builder.answer(usage=usage, tool_call=call):
            await ex.event(chunk)
        await ex.send_chunk(sse.DONE)
        await ex.end_stream()
        return True


@dataclass(frozen=True)
class Status(Step):
    """Any status with a JSON (dict) or raw text (str) body, streamed request or not."""

    code: int
    body: Mapping[str, Any] | str | None = None
    headers: Mapping[str, str] | None = None

    async def respond(self, ex: Exchange) -> bool:
        body = self.body
        if body is None:
            body = {"error": {"message": f"fake upstream answered {self.code}",
                              "type": _ERROR_TYPES.get(self.code, "server_error"),
                              "code": None}}
        if isinstance(body, str):
            await ex.send(self.code, body.encode(), "text/plain; charset=utf-8", self.headers)
        else:
            await ex.send(self.code, json.dumps(body).encode(), "application/json",
                          self.headers)
        return True


@dataclass(frozen=True)
class StreamThenFail(Step):
    """Role chunk and content chunks, then a dropped connection (or a stall)."""

    chunks: tuple[str, ...] = ("partial ",)
    then_stall: bool = False

    async def respond(self, ex: Exchange) -> bool:
        builder = ex.chunks()
        if not ex.stream:  # a buffered body cut in half
            body = json.dumps(completion_body(id=builder.id, model=builder.model,
                                              created=CREATED, usage=usage_dict(10, 1),
                                              text="".join(self.chunks))).encode()
            await ex.send_head(200, {"content-type": "application/json",
                                     "content-length": str(len(body))})
            await ex.write(body[: len(body) // 2])
        else:
            await ex.start_stream()
            await ex.event(builder.role())
            for piece in self.chunks:
                await ex.event(builder.content(piece))
        if self.then_stall:
            await _forever()
        ex.drop()
        return False


@dataclass(frozen=True)
class FailBeforeContent(Step):
    """Streamed: 200, the role chunk, then a dropped connection. Buffered: a plain drop."""

    async def respond(self, ex: Exchange) -> bool:
        if ex.stream:
            await ex.start_stream()
            await ex.event(ex.chunks().role())
        ex.drop()
        return False


@dataclass(frozen=True)
class StreamError(Step):
    """Streamed: 200, the role chunk, a ``data: {"error": ...}`` event, a clean end
    (no ``[DONE]``). Buffered: a 200 whose body is that error object."""

    message: str = "upstream error mid-stream"
    type: str = "server_error"
    after: tuple[str, ...] = ()  # content chunks sent before the error event

    async def respond(self, ex: Exchange) -> bool:
        error = {"error": {"message": self.message, "type": self.type, "code": None}}
        if not ex.stream:
            await ex.send(200, json.dumps(error).encode(), "application/json")
            return True
        await ex.start_stream()
        chunks = ex.chunks()
        await ex.event(chunks.role())
        for text in self.after:
            await ex.event(chunks.content(text))
        await ex.event(error)
        await ex.end_stream()
        return True


@dataclass(frozen=True)
class Delay(Step):
    """Wait ``seconds`` before anything is sent, then do ``then``."""

    seconds: float
    then: Step = field(default_factory=lambda: Ok())

    async def respond(self, ex: Exchange) -> bool:
        await asyncio.sleep(self.seconds)
        return await self.then.respond(ex)


@dataclass(frozen=True)
class Stall(Step):
    """Read the request and never answer; ends only when the upstream stops."""

    async def respond(self, ex: Exchange) -> bool:
        await _forever()
        return False


@dataclass(frozen=True)
class Reset(Step):
    """Close the connection without answering: a TCP RST (``hard``) or a FIN."""

    hard: bool = True

    async def respond(self, ex: Exchange) -> bool:
        ex.drop(hard=self.hard)
        return False


async def _forever() -> None:
    await asyncio.Event().wait()  # cancelled by FakeUpstream.stop()


# -- factories -------------------------------------------------------------------


def ok(text: str | Sequence[str] = "hello", *, usage: Mapping[str, int] | None = None,
       model: str | None = None, headers: Mapping[str, str] | None = None,
       chunk_delay: float = 0.0) -> Ok:
    """A 200 answer. Streamed, a str goes out as ``split_text(text)`` (a few
    chunks) and a sequence as exactly those content chunks.

    ``usage`` defaults to 10 prompt tokens and one completion token per word;
    ``model`` defaults to the request's model.
    """
    pieces = tuple(split_text(text)) if isinstance(text, str) else tuple(text)
    return Ok(pieces, usage, model, headers, chunk_delay)


def tool_call(name: str = "lookup", arguments: str | Mapping[str, Any] = "{}", *,
              call_id: str = "call_fake_1", usage: Mapping[str, int] | None = None,
              headers: Mapping[str, str] | None = None) -> ToolCallAnswer:
    """A 200 answer calling tool ``name`` with ``arguments`` (a JSON string or a dict)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCallAnswer(name, args, call_id, usage, headers)


def status(code: int, body: Mapping[str, Any] | str | None = None,
           headers: Mapping[str, str] | None = None) -> Status:
    """Answer ``code``. Default body: OpenAI's error shape naming the status."""
    return Status(code, body, headers)


def stream_then_fail(text_chunks: Sequence[str] = ("partial ",)) -> StreamThenFail:
    """Stream the role chunk and ``text_chunks``, then close without ending the stream."""
    return StreamThenFail(tuple(text_chunks))


def stream_then_stall(text_chunks: Sequence[str] = ("partial ",)) -> StreamThenFail:
    """Stream the role chunk and ``text_chunks``, then send nothing more, ever."""
    return StreamThenFail(tuple(text_chunks), then_stall=True)


def fail_before_content() -> FailBeforeContent:
    """Start a 200 stream, send only the role chunk, then close the connection."""
    return FailBeforeContent()


def stream_error(message: str = "upstream error mid-stream",
                 type: str = "server_error", *, after: Sequence[str] = ()) -> StreamError:
    """A 200 stream with an error object after the role chunk (and ``after`` content)."""
    return StreamError(message, type, tuple(after))


def delay(seconds: float, then: Step | None = None) -> Delay:
    """Wait (a real ``asyncio.sleep``) before doing ``then`` (default ``ok()``)."""
    return Delay(seconds, then or ok())


def stall() -> Stall:
    """Accept the request and never answer."""
    return Stall()


def reset(hard: bool = True) -> Reset:
    """Drop the connection without answering: RST by default, FIN with ``hard=False``."""
    return Reset(hard)


# -- an upstream coding agents can finish a turn against ----------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _offers(body: Mapping[str, Any], name: str) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(t, dict) and isinstance(t.get("function"), dict)
        and t["function"].get("name") == name for t in tools)


@dataclass(frozen=True)
class AgentTurn(Step):
    """An OpenAI chat model as a coding agent needs one, decided by the request.

    - a ``tool`` message in the conversation (the agent ran the tool): the
      text ``"tool said: <the last one's content>"``, so the tool's output
      visibly reached the model;
    - else, when the request offers a function named ``tool``: a call of it
      with ``arguments`` (streamed in fragments when the request streams);
    - else (no tools, or side requests such as titles): ``text``.
    """

    tool: str | None = None
    arguments: str = "{}"
    text: str = "hello from the fake model"
    call_id: str = "call_agent_1"

    def answer_for(self, body: Mapping[str, Any]) -> Step:
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        assert isinstance(messages, list)
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "tool":
                return ok(f"tool said: {_text_of(message.get('content')).strip()}")
        if self.tool is not None and _offers(body, self.tool):
            return ToolCallAnswer(self.tool, self.arguments, self.call_id)
        return ok(self.text)

    async def respond(self, ex: Exchange) -> bool:
        body = ex.request.json if isinstance(ex.request.json, dict) else {}
        return await self.answer_for(body).respond(ex)


def agent_turn(tool: str | None = None, arguments: str | Mapping[str, Any] = "{}", *,
               text: str = "hello from the fake model") -> AgentTurn:
    """An ``AgentTurn``: call ``tool`` with ``arguments`` when offered and not yet
    answered, then quote its output; ``text`` otherwise. Use it as a
    ``FakeUpstream``'s ``default`` so every request of an agent's run gets one."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return AgentTurn(tool, args, text)
