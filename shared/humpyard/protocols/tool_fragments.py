"""A chat-completion stream's tool-call fragments, gathered into calls.

An OpenAI-style stream sends each tool call in pieces under
``choices[0].delta.tool_calls``: the first names its ``index`` and usually
its ``id`` and function ``name``; later ones add text to ``arguments``. The
Responses and the Anthropic stream translators both turn these into their own
items or blocks; ``ToolCalls`` is what they share: which call a fragment
belongs to, and its id, name and argument text so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from humpyard.protocols.fields import Note

FRAGMENTS_DROPPED = Note("stream_fragment", "tool-call fragments for an already finished "
                         "call dropped: the client's stream cannot reopen it")
"""The note a stream translator's ``dropped_fragments`` becomes in the decision."""


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

    def take(self, fragment: dict) -> tuple[int, ToolCall, str] | None:
        """The fragment's slot, its call (id and name filled in from it), and the
        argument text it carries; None when that call is already closed."""
        slot = self._slot(fragment)
        call = self.by_slot[slot]
        if call.closed:
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
