"""OpenAI chat-completion chunks → Anthropic Messages stream events (pure, no I/O).

A ``StreamTranslator`` is fed each parsed upstream chunk in order and returns
the Anthropic events that chunk produces, as ``(event_name, data)`` pairs;
``finish()`` returns the closing events. The events always form a valid
Anthropic stream::

    message_start, ping,
    (content_block_start, content_block_delta*, content_block_stop)*,
    message_delta, message_stop

Block indexes count from 0 in the order blocks open: a text block, then each
tool call its own ``tool_use`` block. Opening a block closes the one before,
so at most one block is open at a time. ``encode_event`` turns a pair into SSE
bytes.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.protocols import sse
from humpyard.protocols.anthropic import (
    encode_usage,
    map_stop_reason,
    matched_stop_sequence,
    tool_use_id,
)
from humpyard.protocols.chat_chunks import ToolCall, ToolCalls, read_chunk

Event = tuple[str, dict]


def encode_event(name: str, data: dict) -> bytes:
    """One Anthropic event as SSE bytes: ``event: name\\ndata: {json}\\n\\n``."""
    return sse.encode(json.dumps(data, ensure_ascii=False, separators=(",", ":")), event=name)


class StreamTranslator:
    """Turns one upstream chat-completion stream into one Anthropic message stream.

    Contract: call ``feed`` with every chunk in arrival order, then ``finish``
    exactly once; ``feed`` after ``finish`` returns nothing. ``message_start``
    and ``ping`` come with the first ``feed`` (or ``finish`` for an empty
    stream). Only ``choices[0]`` is read; chunks with an ``error`` key are the
    caller's to handle. Usage from any chunk (normally the last, with empty
    ``choices``) goes into ``message_delta``. With ``include_thinking``,
    ``reasoning_content``/``reasoning`` deltas become a ``thinking`` block;
    otherwise they are dropped. A fragment for a tool call whose block was
    already closed (the upstream went back to an earlier index) cannot be
    sent and is counted in ``dropped_fragments``.
    """

    def __init__(
        self,
        model: str,
        message_id: str,
        stop_sequences: list[str] | None = None,
        *,
        include_thinking: bool = False,
    ) -> None:
        self._model = model
        self._message_id = message_id
        self._stops = [s for s in stop_sequences or [] if s]
        self._include_thinking = include_thinking
        self._started = False
        self._finished = False
        self._has_content = False
        self._wrote = False  # text came (a refusal alone ends with ``stop_reason`` refusal)
        self._refused = False
        self._next_index = 0
        self._open: str | int | None = None  # "text", "thinking" or a tool-call slot
        self._tools = ToolCalls()
        self._tail = ""  # the end of the text, for stop-sequence detection
        self._finish_reason: str | None = None
        self._choice_stop: Any = None
        self._usage: dict | None = None

    @property
    def dropped_fragments(self) -> int:
        """Tool-call fragments dropped so far (their block was already closed)."""
        return self._tools.dropped

    @property
    def has_content(self) -> bool:
        """True once a text delta or a tool call has been emitted.

        Thinking deltas do not count: until content arrives the gateway may
        still fail over, because it holds every event back until then.
        """
        return self._has_content

    @property
    def usage(self) -> dict | None:
        """The upstream's OpenAI ``usage`` object, once a chunk carried one."""
        return self._usage

    def feed(self, chunk: dict) -> list[Event]:
        """Translate one parsed upstream chunk; returns the events it produces."""
        if self._finished:
            return []
        events = self._start()
        part = read_chunk(chunk)
        if part.usage is not None:
            self._usage = part.usage
        if part.choice is None:
            return events
        if self._include_thinking and part.reasoning:
            events += self._thinking(part.reasoning)
        if part.text:
            events += self._text(part.text)
            self._wrote = True
        if part.refusal:  # text, as a buffered refusal is (``anthropic.encode_response``)
            events += self._text(part.refusal)
            self._refused = True
        for fragment in part.fragments:
            events += self._tool_call(fragment)
        if part.finish_reason:
            self._finish_reason = part.finish_reason
        if part.choice.get("stop_reason") is not None:
            self._choice_stop = part.choice["stop_reason"]
        return events

    def finish(self) -> list[Event]:
        """The closing events: the open block's stop, ``message_delta``, ``message_stop``.

        Tool calls whose name never arrived are still emitted (with an empty
        name) so their arguments are not lost. The stop reason is ``tool_use``
        whenever a tool call was emitted and the upstream said ``stop`` or
        nothing.
        """
        if self._finished:
            return []
        events = self._start()
        for slot, call in self._tools.by_slot.items():
            if call.block is None and not call.closed:
                events += self._open_tool(slot, call)
        events += self._close()
        self._finished = True
        stop = matched_stop_sequence({"stop_reason": self._choice_stop}, self._tail, self._stops)
        reason = map_stop_reason(self._finish_reason, stop is not None)
        if reason == "end_turn" and any(c.block is not None
                                          for c in self._tools.by_slot.values()):
            reason = "tool_use"
        elif reason == "end_turn" and self._refused and not self._wrote:
            reason = "refusal"
        usage = encode_usage(self._usage)
        delta_usage = usage if self._usage is not None else {"output_tokens": 0}
        events.append(("message_delta", {
            "type": "message_delta",
            "delta": {
                "stop_reason": reason,
                "stop_sequence": stop if reason == "stop_sequence" else None,
            },
            "usage": delta_usage,
        }))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def _start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        message: dict[str, Any] = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [("message_start", {"type": "message_start", "message": message}),
                ("ping", {"type": "ping"})]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        if isinstance(self._open, int):
            self._tools.by_slot[self._open].closed = True
        self._open = None
        index = self._next_index - 1
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _begin(self, kind: str | int, block: dict) -> list[Event]:
        events = self._close()
        self._open = kind
        index = self._next_index
        self._next_index += 1
        events.append(("content_block_start", {
            "type": "content_block_start", "index": index, "content_block": block,
        }))
        return events

    def _delta(self, delta: dict) -> Event:
        index = self._next_index - 1
        return ("content_block_delta", {"type": "content_block_delta", "index": index,
                                        "delta": delta})

    def _text(self, text: str) -> list[Event]:
        events = [] if self._open == "text" else self._begin("text", {"type": "text", "text": ""})
        events.append(self._delta({"type": "text_delta", "text": text}))
        self._has_content = True
        keep = max((len(s) for s in self._stops), default=0)
        self._tail = (self._tail + text)[-keep:] if keep else ""
        return events

    def _thinking(self, text: str) -> list[Event]:
        events = []
        if self._open != "thinking":
            events = self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        events.append(self._delta({"type": "thinking_delta", "thinking": text}))
        return events

    def _tool_call(self, fragment: dict) -> list[Event]:
        taken = self._tools.take(fragment)
        if taken is None:
            return []
        slot, call, arguments = taken
        if self._open == slot:
            return [self._delta({"type": "input_json_delta", "partial_json": arguments})] \
                if arguments else []
        call.pending += arguments
        if not call.name:  # a tool_use block needs its name when it opens
            return []
        return self._open_tool(slot, call)

    def _open_tool(self, slot: int, call: ToolCall) -> list[Event]:
        if not call.id:
            call.id = tool_use_id(self._message_id, slot)
        events = self._begin(slot, {"type": "tool_use", "id": call.id, "name": call.name,
                                     "input": {}})
        call.block = self._next_index - 1
        self._has_content = True
        if call.pending:
            events.append(self._delta({"type": "input_json_delta",
                                       "partial_json": call.pending}))
            call.pending = ""
        return events
