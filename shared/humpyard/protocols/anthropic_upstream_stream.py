"""Anthropic Messages stream events → OpenAI chat-completion chunks (pure, no I/O).

For a provider with ``protocol = "anthropic"``, the executor decodes the
upstream's SSE (``sse.SSEDecoder``), feeds each event's name and parsed data
to a ``ChunkTranslator``, and hands the chunks it returns (as
``encode_chunk`` bytes) to the stream machinery built for OpenAI upstreams:
content detection, hold-back and failover, usage, the client encoders.

``text_delta`` → ``content``; ``tool_use`` blocks → ``tool_calls`` (the id
and name on the first fragment, then ``input_json_delta`` as ``arguments``);
``thinking_delta`` → ``reasoning_content``; ``message_delta``'s stop reason →
``finish_reason``; usage (input and cache counts from ``message_start``,
output from ``message_delta``) → a last chunk with empty ``choices``; an
``error`` event → a chunk ``{"error": {...}}`` with no choices, which the
executor treats as a broken stream.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.protocols.anthropic_upstream import chat_usage, finish_reason


def encode_chunk(chunk: dict) -> bytes:
    """One chat chunk as SSE bytes: ``data: {json}\\n\\n``."""
    return b"data: " + json.dumps(chunk, ensure_ascii=False,
                                  separators=(",", ":")).encode() + b"\n\n"


class ChunkTranslator:
    """One Anthropic message stream → one chat-completion chunk stream.

    Contract: ``feed(event, data)`` for each event in order; it returns the
    chunks to pass on. ``done`` is True after ``message_stop`` or an ``error``
    event (then send ``data: [DONE]`` after a ``message_stop``). The usage
    chunk comes with ``message_stop`` when ``include_usage`` (the gateway's
    stream reader always wants it; it strips the chunk for clients that did
    not ask). ``created`` and ``model`` fill the chunks' fields until
    ``message_start`` names the upstream's model.
    """

    def __init__(self, *, created: int = 0, model: str = "",
                 include_usage: bool = True) -> None:
        self._created = created
        self._model = model
        self._id = "msg"
        self._include_usage = include_usage
        self._usage: dict[str, Any] = {}
        self._tool_index: dict[int, int] = {}  # Anthropic block index -> tool call index
        self._argued: set[int] = set()  # tool call indexes some arguments went out for
        self.done = False

    @property
    def usage(self) -> dict:
        """The OpenAI usage of the stream so far (``anthropic_upstream.chat_usage``)."""
        return chat_usage(self._usage)

    def _chunk(self, delta: dict | None = None, finish: str | None = None) -> dict:
        return {"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                "model": self._model,
                "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}

    def feed(self, event: str | None, data: Any) -> list[dict]:
        """Translate one upstream event (its ``event:`` name and parsed ``data``)."""
        if self.done or not isinstance(data, dict):
            return []
        kind = data.get("type") or event
        if kind == "message_start":
            return self._start(data.get("message"))
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_delta":
            return self._block_delta(data)
        if kind == "content_block_stop":
            return self._block_stop(data)
        if kind == "message_delta":
            return self._message_delta(data)
        if kind == "message_stop":
            self.done = True
            if not self._include_usage:
                return []
            return [{"id": self._id, "object": "chat.completion.chunk",
                     "created": self._created, "model": self._model, "choices": [],
                     "usage": self.usage}]
        if kind == "error":
            self.done = True
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            assert isinstance(error, dict)
            return [{"error": {"message": str(error.get("message") or "upstream error"),
                               "type": str(error.get("type") or "api_error"),
                               "code": error.get("type")}}]
        return []  # ping and events added later

    def _start(self, message: Any) -> list[dict]:
        message = message if isinstance(message, dict) else {}
        if isinstance(message.get("id"), str):
            self._id = message["id"]
        if isinstance(message.get("model"), str) and message["model"]:
            self._model = message["model"]
        if isinstance(message.get("usage"), dict):
            self._usage.update(message["usage"])
        return [self._chunk({"role": "assistant", "content": ""})]

    def _block_start(self, data: dict) -> list[dict]:
        block = data.get("content_block")
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            text = block.get("text") if isinstance(block, dict) else None
            return [self._chunk({"content": text})] if isinstance(text, str) and text else []
        index = len(self._tool_index)
        self._tool_index[_int(data.get("index"))] = index
        initial = block.get("input")
        arguments = json.dumps(initial) if isinstance(initial, dict) and initial else ""
        if arguments:
            self._argued.add(index)
        return [self._chunk({"tool_calls": [{
            "index": index, "id": str(block.get("id") or f"toolu_{index}"), "type": "function",
            "function": {"name": str(block.get("name") or ""), "arguments": arguments}}]})]

    def _block_delta(self, data: dict) -> list[dict]:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            return [self._chunk({"content": delta["text"]})]
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return [self._chunk({"reasoning_content": delta["thinking"]})]
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            index = self._tool_index.get(_int(data.get("index")))
            if index is None or not delta["partial_json"]:
                return []
            self._argued.add(index)
            return [self._chunk({"tool_calls": [{
                "index": index, "function": {"arguments": delta["partial_json"]}}]})]
        return []  # signature_delta, citations_delta: nothing chat can carry

    def _block_stop(self, data: dict) -> list[dict]:
        """A tool call that ended with no argument sent (a tool without input: Anthropic
        streams ``{}`` as an empty ``partial_json``) gets ``{}``, as a buffered answer's
        does: its arguments were ``""``, which is no JSON a client can parse."""
        index = self._tool_index.get(_int(data.get("index")))
        if index is None or index in self._argued:
            return []
        self._argued.add(index)
        return [self._chunk({"tool_calls": [{"index": index, "function": {"arguments": "{}"}}]})]

    def _message_delta(self, data: dict) -> list[dict]:
        if isinstance(data.get("usage"), dict):
            # message_delta's counts are cumulative; non-null ones replace the start's
            self._usage.update({k: v for k, v in data["usage"].items() if v is not None})
        delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
        assert isinstance(delta, dict)
        if "stop_reason" not in delta or delta["stop_reason"] is None:
            return []
        return [self._chunk(finish=finish_reason(delta["stop_reason"]))]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
