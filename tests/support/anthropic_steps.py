"""``FakeUpstream`` steps that answer as an Anthropic Messages upstream.

A ``FakeUpstream`` serves whatever its steps write, so an Anthropic-native
provider is a ``FakeUpstream`` whose ``url`` is the provider's ``base_url``
(requests arrive at ``/v1/messages`` and ``/v1/messages/count_tokens``) and
whose steps are these::

    with FakeUpstream(default=message("hi")) as up:
        up.script(error(529, "overloaded_error", "Overloaded"), message("hello"))

Answers follow Anthropic's documented shapes: a buffered ``message`` object,
or (when the request says ``"stream": true``) the event sequence
``message_start``, ``content_block_start``/``_delta``/``_stop`` per block
(with a ``ping``), ``message_delta`` with the stop reason and usage,
``message_stop``. Errors are ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.steps import Exchange, Step

MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
DEFAULT_USAGE = {"input_tokens": 10, "output_tokens": 5}


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def tool_use(name: str, arguments: Mapping[str, Any], call_id: str = "toolu_fake_1") -> dict:
    """A tool_use block."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": dict(arguments)}


def thinking(value: str, signature: str = "sig-fake") -> dict[str, Any]:
    """A thinking block (with its signature)."""
    return {"type": "thinking", "thinking": value, "signature": signature}


def event(name: str, data: Mapping[str, Any]) -> bytes:
    """One SSE event as Anthropic sends it: ``event:`` line, one ``data:`` line."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


@dataclass(frozen=True)
class Message(Step):
    """A 200 answer made of ``blocks``; streamed when the request asks."""

    blocks: tuple[dict[str, Any], ...] = (text("hello"),)
    usage: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_USAGE))
    stop_reason: str | None = None
    model: str | None = None
    headers: Mapping[str, str] | None = None

    def _stop(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b["type"] == "tool_use" for b in self.blocks) else "end_turn"

    def body(self, ex: Exchange) -> dict[str, Any]:
        return {"id": f"msg_fake{ex.seq}", "type": "message", "role": "assistant",
                "model": self.model or ex.model, "content": list(self.blocks),
                "stop_reason": self._stop(), "stop_sequence": None, "usage": dict(self.usage)}

    async def respond(self, ex: Exchange) -> bool:
        if not ex.stream:
            await ex.send(200, json.dumps(self.body(ex)).encode(), "application/json",
                          self.headers)
            return True
        await ex.start_stream(self.headers)
        for chunk in self.events(ex):
            await ex.send_chunk(chunk)
        await ex.end_stream()
        return True

    def events(self, ex: Exchange) -> list[bytes]:
        start = {**self.body(ex), "content": [], "stop_reason": None,
                 "usage": {**self.usage, "output_tokens": 1}}
        out = [event("message_start", {"type": "message_start", "message": start}),
               event("ping", {"type": "ping"})]
        for i, block in enumerate(self.blocks):
            out.extend(_block_events(i, block))
        out.append(event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": self._stop(), "stop_sequence": None},
            "usage": {"output_tokens": self.usage.get("output_tokens", 0)}}))
        out.append(event("message_stop", {"type": "message_stop"}))
        return out


def _block_events(i: int, block: Mapping[str, Any]) -> list[bytes]:
    kind = block["type"]
    out = []
    if kind == "text":
        out.append(event("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": {"type": "text", "text": ""}}))
        words = block["text"].split(" ")
        for j, word in enumerate(words):
            piece = word if j == len(words) - 1 else word + " "
            out.append(event("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "text_delta", "text": piece}}))
    elif kind == "thinking":
        out.append(event("content_block_start", {
            "type": "content_block_start", "index": i,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
        out.append(event("content_block_delta", {
            "type": "content_block_delta", "index": i,
            "delta": {"type": "thinking_delta", "thinking": block["thinking"]}}))
        out.append(event("content_block_delta", {
            "type": "content_block_delta", "index": i,
            "delta": {"type": "signature_delta", "signature": block["signature"]}}))
    elif kind == "tool_use":
        out.append(event("content_block_start", {
            "type": "content_block_start", "index": i,
            "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"],
                              "input": {}}}))
        args = json.dumps(block["input"])
        half = len(args) // 2
        for piece in (args[:half], args[half:]):
            out.append(event("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": piece}}))
    out.append(event("content_block_stop", {"type": "content_block_stop", "index": i}))
    return out


@dataclass(frozen=True)
class Error(Step):
    """An error answer in Anthropic's shape, whatever the request."""

    code: int
    type: str
    message: str
    headers: Mapping[str, str] | None = None

    async def respond(self, ex: Exchange) -> bool:
        body = {"type": "error", "error": {"type": self.type, "message": self.message}}
        await ex.send(self.code, json.dumps(body).encode(), "application/json", self.headers)
        return True


@dataclass(frozen=True)
class StreamError(Step):
    """A 200 stream: ``message_start``, the text of ``after`` (if any), then an
    ``error`` event and a clean end."""

    type: str = "overloaded_error"
    message: str = "Overloaded"
    after: str = ""

    async def respond(self, ex: Exchange) -> bool:
        await ex.start_stream()
        events = Message((text(self.after),) if self.after else ()).events(ex)
        keep = 2 + (len(_block_events(0, text(self.after))) - 1 if self.after else 0)
        for chunk in events[:keep]:
            await ex.send_chunk(chunk)
        await ex.send_chunk(event("error", {"type": "error", "error": {
            "type": self.type, "message": self.message}}))
        await ex.end_stream()
        return True


@dataclass(frozen=True)
class Count(Step):
    """The count_tokens answer: ``{"input_tokens": n}``."""

    tokens: int

    async def respond(self, ex: Exchange) -> bool:
        await ex.send(200, json.dumps({"input_tokens": self.tokens}).encode(),
                      "application/json")
        return True


def message(*blocks: dict[str, Any] | str, usage: Mapping[str, int] | None = None,
            stop_reason: str | None = None, model: str | None = None,
            headers: Mapping[str, str] | None = None) -> Message:
    """A 200 Messages answer; a str is a text block. Default: one ``hello`` block."""
    made = tuple(text(b) if isinstance(b, str) else b for b in blocks) or (text("hello"),)
    return Message(made, dict(usage or DEFAULT_USAGE), stop_reason, model, headers)


def error(code: int, type: str, message: str,
          headers: Mapping[str, str] | None = None) -> Error:
    """Answer ``code`` with Anthropic's error body."""
    return Error(code, type, message, headers)


def stream_error(type: str = "overloaded_error", message: str = "Overloaded", *,
                 after: str = "") -> StreamError:
    """A stream that fails with an ``error`` event (after ``after``'s text, if any)."""
    return StreamError(type, message, after)


def count(tokens: int) -> Count:
    """A count_tokens answer."""
    return Count(tokens)


def bodies(requests: Sequence[Any], path: str = MESSAGES) -> list[dict[str, Any]]:
    """The JSON bodies of the recorded requests to ``path``."""
    return [r.json for r in requests if r.path == path]
