"""Reading a chat-completion stream's chunks, for the stream translators.

Each chunk of an OpenAI-style stream carries, in ``choices[0].delta``, text,
reasoning text and tool calls, plus ``finish_reason`` and (last, often alone)
``usage``. ``read_chunk`` takes those out once for the Responses and the
Anthropic stream translators. Tool calls come in pieces: the first names its
``index`` and usually its ``id`` and function ``name``; later ones add text
to ``arguments``. ``ToolCalls`` gathers them: which call a fragment belongs
to, and its id, name and argument text so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from humpyard.protocols.fields import Note

FRAGMENTS_DROPPED = Note("stream_fragment", "tool-call fragments for an already finished "
                         "call dropped: the client's stream cannot reopen it")
"""The note a stream translator's ``dropped_fragments`` becomes in the decision."""


def note_dropped(notes: list[str], dropped: int) -> None:
    """Note ``FRAGMENTS_DROPPED`` in ``notes`` (once) when ``dropped`` fragments were."""
    if dropped and FRAGMENTS_DROPPED not in notes:
        notes.append(FRAGMENTS_DROPPED)


class Chunk(NamedTuple):
    """What one chunk carries; ``choice`` is None when it has no choice (a usage-only
    chunk), and then the other fields are empty."""

    usage: dict | None
    choice: dict | None
    reasoning: str
    text: str
    fragments: list[dict]
    finish_reason: Any
    refusal: str = ""  # ``delta.refusal``: the model declining, in place of text


def read_chunk(chunk: dict) -> Chunk:
    """The parts of one parsed chunk, each checked for its type (anything else is
    read as absent)."""
    usage = chunk.get("usage")
    usage = usage if isinstance(usage, dict) else None
    choices = chunk.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        return Chunk(usage, None, "", "", [], None)
    delta = choice.get("delta")
    delta = delta if isinstance(delta, dict) else {}
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    text = delta.get("content")
    calls = delta.get("tool_calls")
    refusal = delta.get("refusal")
    return Chunk(usage, choice,
                 reasoning if isinstance(reasoning, str) else "",
                 text if isinstance(text, str) else "",
                 [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else [],
                 choice.get("finish_reason"),
                 refusal if isinstance(refusal, str) else "")


@dataclass
class ToolCall:
    """One upstream tool call as its fragments arrive."""

    id: str = ""
    name: str = ""
    pending: str = ""  # argument text that arrived before the name
    closed: bool = False  # its item or block is closed: later fragments are dropped
    block: int | None = None  # the Anthropic content block it opened, if any


class ToolCalls:
    """The calls of one stream, by slot (in order of first sight)."""

    def __init__(self) -> None:
        self.by_slot: dict[int, ToolCall] = {}
        self._slots: dict[int, int] = {}  # upstream tool-call index -> current slot
        self.dropped = 0  # fragments for a call already closed

    def take(self, fragment: dict) -> tuple[int, ToolCall, str] | None:
        """The fragment's slot, its call (id and name filled in from it), and the
        argument text it carries; None when that call is already closed."""
        slot = self._slot(fragment)
        call = self.by_slot[slot]
        if call.closed:
            self.dropped += 1
            return None
        function = fragment.get("function")
        function = function if isinstance(function, dict) else {}
        if isinstance(fragment.get("id"), str) and not call.id:
            call.id = fragment["id"]
        if isinstance(function.get("name"), str) and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        return slot, call, arguments if isinstance(arguments, str) else ""

    def _slot(self, fragment: dict) -> int:
        """The slot a fragment belongs to, by its ``index``; a new id at a used index
        (upstreams that omit ``index``) starts a new call."""
        index = fragment.get("index", 0)
        index = index if isinstance(index, int) else 0
        new_id = fragment.get("id")
        slot = self._slots.get(index)
        if slot is not None:
            known = self.by_slot[slot].id
            if not (isinstance(new_id, str) and new_id and known and new_id != known):
                return slot
        slot = len(self.by_slot)
        self._slots[index] = slot
        self.by_slot[slot] = ToolCall()
        return slot
