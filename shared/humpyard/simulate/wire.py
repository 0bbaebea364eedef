"""OpenAI Chat Completions wire shapes: buffered bodies, stream chunks, errors.

Pure builders (no I/O) shared by the simulator and the test fake upstream, so
both speak exactly the same dialect: the shapes, field order and ``null``s of
OpenAI's API, including ``usage: null`` on every chunk when the client asked
for ``stream_options.include_usage``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from humpyard.protocols import sse


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call an answer makes; ``arguments`` is a JSON string."""

    id: str
    name: str
    arguments: str


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def split_text(text: str, parts: int = 4) -> list[str]:
    """Split ``text`` into at most ``parts`` non-empty pieces that join back to it."""
    if len(text) <= 1 or parts <= 1:
        return [text]
    words = text.split(" ")
    if len(words) == 1:  # one word: cut by characters instead
        step = max(1, -(-len(text) // parts))
        return [text[i : i + step] for i in range(0, len(text), step)]
    per = -(-len(words) // parts)
    groups = [words[i : i + per] for i in range(0, len(words), per)]
    pieces = [" ".join(g) for g in groups]
    pieces = [p if i == len(pieces) - 1 else p + " " for i, p in enumerate(pieces)]
    return [p for p in pieces if p]


def completion_body(
    *, id: str, model: str, created: int, usage: dict[str, int],
    text: str | None = None, tool_call: ToolCall | None = None,
) -> dict[str, Any]:
    """A buffered ``chat.completion`` answering ``text`` or making ``tool_call``."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_call is not None:
        message["content"] = None
        message["tool_calls"] = [{
            "id": tool_call.id, "type": "function",
            "function": {"name": tool_call.name, "arguments": tool_call.arguments},
        }]
    return {
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{
            "index": 0, "message": message, "logprobs": None,
            "finish_reason": "tool_calls" if tool_call is not None else "stop",
        }],
        "usage": usage,
    }


class ChunkBuilder:
    """Builds the chunks of one streamed completion in OpenAI's exact shape.

    With ``include_usage`` every chunk carries ``"usage": null`` and the stream
    should end with ``usage_chunk()`` (``choices: []``), as OpenAI does.
    """

    def __init__(self, *, id: str, model: str, created: int, include_usage: bool = False):
        self.id, self.model, self.created = id, model, created
        self.include_usage = include_usage

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": None, "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        """A chunk with one choice carrying ``delta``."""
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._chunk([choice])

    def role(self) -> dict[str, Any]:
        return self.delta({"role": "assistant", "content": "", "refusal": None})

    def content(self, text: str) -> dict[str, Any]:
        return self.delta({"content": text})

    def tool_call_start(self, call: ToolCall) -> dict[str, Any]:
        """The first tool-call delta: id, name and empty arguments (with the role)."""
        return self.delta({"role": "assistant", "content": None, "tool_calls": [{
            "index": 0, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]})

    def tool_call_arguments(self, fragment: str) -> dict[str, Any]:
        return self.delta({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]})

    def finish(self, reason: str = "stop") -> dict[str, Any]:
        return self.delta({}, reason)

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        chunk = self._chunk([])
        chunk["usage"] = usage
        return chunk

    def answer(
        self, *, usage: dict[str, int], text: str | None = None,
        tool_call: ToolCall | None = None, pieces: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every chunk of a whole answer, in order (``[DONE]`` not included).

        Text goes out as ``pieces`` (default: ``split_text(text)``); tool-call
        arguments always go out in at least two fragments.
        """
        if tool_call is not None:
            args = tool_call.arguments
            frags = split_text(args, max(2, min(4, len(args) // 8)))
            chunks = [self.tool_call_start(tool_call)]
            chunks += [self.tool_call_arguments(f) for f in frags]
            chunks.append(self.finish("tool_calls"))
        else:
            chunks = [self.role()]
            chunks += [self.content(p) for p in (pieces or split_text(text or ""))]
            chunks.append(self.finish("stop"))
        if self.include_usage:
            chunks.append(self.usage_chunk(usage))
        return chunks


def encode_event(obj: dict[str, Any]) -> bytes:
    """One SSE ``data:`` event carrying ``obj`` as compact JSON."""
    return sse.encode(json.dumps(obj, separators=(",", ":")))


def error_body(message: str, type: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": type, "code": code}}
