"""OpenAI chat-completion chunks → Responses API stream events (pure, no I/O).

A ``ResponsesStreamTranslator`` is fed each parsed upstream chunk in order and
returns the Responses events that chunk produces, as ``(event_type, data)``
pairs; ``finish()`` returns the closing events and ``fail()`` the events that
end a broken stream. The events follow the order the official SDK's
accumulator checks::

    response.created, response.in_progress,
    ( output_item.added,
        [content_part.added, (output_text | refusal | reasoning_text).delta*,
         .done, content_part.done]     # message (text or refusal) and reasoning items
      | [function_call_arguments.delta*, .done]      # function calls
      | [custom_tool_call_input.delta, .done],       # custom tool calls
      output_item.done )*,
    response.completed | response.incomplete | (error, response.failed)

Every event carries a ``sequence_number`` counting from 0. At most one item is
open at a time: opening one closes the one before (a reasoning item, then the
message, then each tool call in turn). ``encode_event`` gives SSE bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from humpyard.protocols import sse
from humpyard.protocols.chat_chunks import ToolCall, ToolCalls, read_chunk
from humpyard.protocols.responses import (
    encode_usage,
    function_call_item,
    message_item,
    reasoning_item,
    response_object,
    status_for,
)
from humpyard.protocols.responses_request import ResponsesContext

Event = tuple[str, dict]


def encode_event(name: str, data: dict) -> bytes:
    """One Responses event as SSE bytes: ``event: <type>\\ndata: {json}\\n\\n``."""
    return sse.encode(json.dumps(data, ensure_ascii=False, separators=(",", ":")), event=name)


@dataclass
class _Open:
    """The item being streamed."""

    kind: str  # "reasoning", "message" or "call"
    index: int  # its output_index
    item_id: str
    text: str = ""  # message/reasoning text, or call arguments
    slot: int = -1  # for calls: the upstream call's slot


class ResponsesStreamTranslator:
    """Turns one upstream chat-completion stream into one Responses event stream.

    Contract: call ``feed`` with every chunk in arrival order, then exactly one
    of ``finish`` (the upstream ended) or ``fail`` (it broke); later calls
    return nothing. The opening events come with the first call. Only
    ``choices[0]`` is read. Reasoning deltas (``reasoning_content`` or
    ``reasoning``) become a reasoning item. A fragment for a tool call already
    closed (an upstream that went back to an earlier call) cannot be sent and
    is counted in ``dropped_fragments``.
    """

    def __init__(self, ctx: ResponsesContext, response_id: str, created_at: int) -> None:
        self._ctx = ctx
        self._id = response_id
        self._suffix = response_id.removeprefix("resp_")
        self._created_at = created_at
        self._seq = 0
        self._started = False
        self._ended = False
        self._has_content = False
        self._open: _Open | None = None
        self._output: list[dict] = []  # finished items, in output_index order
        self._calls = ToolCalls()
        self._finish_reason: Any = None
        self._usage: dict | None = None

    @property
    def dropped_fragments(self) -> int:
        """Tool-call fragments dropped so far (their call was already closed)."""
        return self._calls.dropped

    @property
    def has_content(self) -> bool:
        """True once output text or a tool call has been emitted (reasoning does not count)."""
        return self._has_content

    @property
    def usage(self) -> dict | None:
        """The upstream's OpenAI ``usage`` object, once a chunk carried one."""
        return self._usage

    def feed(self, chunk: dict) -> list[Event]:
        """Translate one parsed upstream chunk; returns the events it produces."""
        if self._ended:
            return []
        events = self._start()
        part = read_chunk(chunk)
        if part.usage is not None:
            self._usage = part.usage
        if part.reasoning:
            events += self._stream_text("reasoning", part.reasoning)
        if part.text:
            events += self._stream_text("message", part.text)
            self._has_content = True
        if part.refusal:  # a message whose part is a refusal, as a buffered one's is
            events += self._stream_text("refusal", part.refusal)
            self._has_content = True
        for fragment in part.fragments:
            events += self._tool_call(fragment)
        if part.finish_reason:
            self._finish_reason = part.finish_reason
        return events

    def finish(self) -> list[Event]:
        """Close the open item and end with ``response.completed`` (or ``.incomplete``)."""
        if self._ended:
            return []
        events = self._start()
        for slot, call in self._calls.by_slot.items():
            if not call.closed and (self._open is None or self._open.slot != slot):
                events += self._open_call(slot, call)  # calls whose name never came
        events += self._close()
        self._ended = True
        status, reason = status_for(self._finish_reason)
        response = response_object(self._ctx, response_id=self._id,
                                   created_at=self._created_at, status=status,
                                   output=list(self._output),
                                   usage=encode_usage(self._usage), incomplete_reason=reason)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append(self._event(kind, {"response": response}))
        return events

    def fail(self, message: str, code: str = "server_error") -> list[Event]:
        """End a broken stream: an ``error`` event, then ``response.failed``.

        The failed response holds the items finished so far; the open one is
        left unfinished, as the upstream left it.
        """
        if self._ended:
            return []
        events = self._start()
        self._ended = True
        events.append(self._event("error", {"code": code, "message": message, "param": None}))
        response = response_object(self._ctx, response_id=self._id,
                                   created_at=self._created_at, status="failed",
                                   output=list(self._output),
                                   usage=encode_usage(self._usage) if self._usage else None,
                                   error={"code": code, "message": message})
        events.append(self._event("response.failed", {"response": response}))
        return events

    # -- events -------------------------------------------------------------------

    def _event(self, kind: str, data: dict) -> Event:
        event = (kind, {"type": kind, "sequence_number": self._seq, **data})
        self._seq += 1
        return event

    def _start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        response = response_object(self._ctx, response_id=self._id, created_at=self._created_at,
                                   status="in_progress", output=[])
        return [self._event("response.created", {"response": response}),
                self._event("response.in_progress", {"response": response})]

    def _begin(self, kind: str, item: dict, slot: int = -1) -> list[Event]:
        events = self._close()
        index = len(self._output)
        self._open = _Open(kind, index, item["id"], slot=slot)
        events.append(self._event("response.output_item.added",
                                  {"output_index": index, "item": item}))
        if kind in ("message", "reasoning", "refusal"):
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []} \
                if kind == "message" else {"type": "reasoning_text", "text": ""} \
                if kind == "reasoning" else {"type": "refusal", "refusal": ""}
            events.append(self._event("response.content_part.added", {
                "item_id": item["id"], "output_index": index, "content_index": 0,
                "part": part}))
        return events

    def _stream_text(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open.kind != kind:
            index = len(self._output) + (1 if self._open is not None else 0)
            if kind in ("message", "refusal"):
                item = {**message_item(f"msg_{self._suffix}_{index}", "",
                                       status="in_progress"), "content": []}
            else:
                item = {**reasoning_item(f"rs_{self._suffix}_{index}", ""), "content": []}
            events += self._begin(kind, item)
        assert self._open is not None
        self._open.text += text
        name = {"message": "response.output_text.delta", "refusal": "response.refusal.delta"
                }.get(kind, "response.reasoning_text.delta")
        data = {"item_id": self._open.item_id, "output_index": self._open.index,
                "content_index": 0, "delta": text}
        if kind == "message":
            data["logprobs"] = []
        events.append(self._event(name, data))
        return events

    def _close(self) -> list[Event]:
        item = self._open
        if item is None:
            return []
        self._open = None
        ids = {"item_id": item.item_id, "output_index": item.index}
        events: list[Event] = []
        if item.kind == "message":
            done = message_item(item.item_id, item.text)
            events.append(self._event("response.output_text.done",
                                      {**ids, "content_index": 0, "text": item.text,
                                       "logprobs": []}))
            events.append(self._event("response.content_part.done",
                                      {**ids, "content_index": 0, "part": done["content"][0]}))
        elif item.kind == "refusal":
            done = message_item(item.item_id, item.text, refusal=True)
            events.append(self._event("response.refusal.done",
                                      {**ids, "content_index": 0, "refusal": item.text}))
            events.append(self._event("response.content_part.done",
                                      {**ids, "content_index": 0, "part": done["content"][0]}))
        elif item.kind == "reasoning":
            done = reasoning_item(item.item_id, item.text)
            events.append(self._event("response.reasoning_text.done",
                                      {**ids, "content_index": 0, "text": item.text}))
            events.append(self._event("response.content_part.done",
                                      {**ids, "content_index": 0, "part": done["content"][0]}))
        else:
            call = self._calls.by_slot[item.slot]
            call.closed = True
            done = function_call_item(self._ctx, item.item_id, call.id, call.name, item.text)
            if done["type"] == "custom_tool_call":
                events.append(self._event("response.custom_tool_call_input.delta",
                                          {**ids, "delta": done["input"]}))
                events.append(self._event("response.custom_tool_call_input.done",
                                          {**ids, "input": done["input"]}))
            else:
                events.append(self._event("response.function_call_arguments.done",
                                          {**ids, "arguments": item.text}))
        self._output.append(done)
        events.append(self._event("response.output_item.done",
                                  {"output_index": item.index, "item": done}))
        return events

    # -- tool calls ---------------------------------------------------------------

    def _tool_call(self, fragment: dict) -> list[Event]:
        taken = self._calls.take(fragment)
        if taken is None:
            return []
        slot, call, arguments = taken
        if self._open is not None and self._open.kind == "call" and self._open.slot == slot:
            return self._arguments(arguments)
        call.pending += arguments
        if not call.name:  # the item needs its name when it opens
            return []
        return self._open_call(slot, call)

    def _open_call(self, slot: int, call: ToolCall) -> list[Event]:
        index = len(self._output) + (1 if self._open is not None else 0)
        if not call.id:
            call.id = f"call_{self._suffix}_{slot}"
        item = function_call_item(self._ctx, f"fc_{self._suffix}_{index}", call.id, call.name,
                                  "", status="in_progress")
        if item["type"] == "custom_tool_call":
            item["input"] = ""
        events = self._begin("call", item, slot)
        self._has_content = True
        pending, call.pending = call.pending, ""
        return events + self._arguments(pending)

    def _arguments(self, text: str) -> list[Event]:
        item = self._open
        assert item is not None
        if not text:
            return []
        item.text += text
        if self._ctx.names.lookup(self._calls.by_slot[item.slot].name).custom:
            return []  # a custom tool's input is sent whole when the call closes
        return [self._event("response.function_call_arguments.delta",
                            {"item_id": item.item_id, "output_index": item.index,
                             "delta": text})]
