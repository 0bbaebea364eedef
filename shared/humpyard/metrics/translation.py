"""What a translation note is about, as a label value from a fixed vocabulary.

Every field a client protocol's translation cannot carry as sent is noted in
the request's decision (``protocols/``: ``decode_request`` notes, stream
notes); ``humpyard_translation_drops_total{protocol,what}`` counts them by
``what``. A note's text may quote the request (an unknown field's name, a
value), so the label is never taken from it: ``note_kind`` maps the note to
one of ``KINDS`` by the fixed opening each note the gateway writes starts
with, and anything else to ``other`` (docs/operations.md, "Metrics").
"""

from __future__ import annotations

# (opening of the note, kind), first match wins; the openings are the gateway's own
# wording in protocols/ and http/ (tests/unit/metrics/test_translation_kinds.py
# checks every note the captured agents' requests produce maps to a kind).
_OPENINGS: tuple[tuple[str, str], ...] = (
    ("cache_control", "cache_control"),
    ("x-anthropic-billing-header", "billing_header"),
    ("metadata.user_id", "client_id"),
    ("user not forwarded", "client_id"),
    ("safety_identifier not forwarded", "client_id"),
    ("reasoning items", "reasoning"),
    ("encrypted reasoning", "reasoning"),
    ("reasoning.", "reasoning"),
    ("reasoning_effort", "reasoning"),
    ("thinking", "thinking"),
    ("output_config.", "thinking"),
    ("built-in tool", "hosted_tool"),
    ("include ", "include"),
    ("prompt_cache_key", "prompt_cache_key"),
    ("tool output images", "tool_output_image"),
    ("tool_result images", "tool_output_image"),
    ("tool-call fragments", "stream_fragment"),
    ("top_k", "sampling"),
    ("temperature", "sampling"),
    ("truncation", "sampling"),
    ("max_tokens", "max_tokens"),
    ("a file part", "content_part"),
)
# Checked first: these notes open with a name from the request.
_ENDINGS: tuple[tuple[str, str], ...] = (
    ("ignored: not translated to the upstream", "ignored_field"),
    ("content part dropped: Anthropic Messages takes none", "content_part"),
    ("dropped: Anthropic Messages takes none", "ignored_field"),
    ("folded into user turns as <system-reminder> text", "system_message"),
)

KINDS: tuple[str, ...] = tuple(sorted({k for _, k in (*_OPENINGS, *_ENDINGS)} | {"other"}))
"""Every value ``note_kind`` returns."""


def note_kind(note: str) -> str:
    """The kind of one translation note: a member of ``KINDS``, ``other`` when unknown."""
    for ending, kind in _ENDINGS:
        if note.endswith(ending):
            return kind
    for opening, kind in _OPENINGS:
        if note.startswith(opening):
            return kind
    return "other"
