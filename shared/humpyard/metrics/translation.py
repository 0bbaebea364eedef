"""What a translation note is about, as a label value from a fixed vocabulary.

Every field a client protocol's translation cannot carry as sent is noted in
the request's decision (``protocols/``: decoder notes, fitting notes, stream
notes); ``humpyard_translation_drops_total{protocol,what}`` counts them by
``what``. A note's text may quote the request (an unknown field's name, a
value), so the label is never taken from it: each note is a
``protocols.fields.Note`` that carries its kind, set where it is written, and
``note_kind`` reads that (docs/operations.md, "Metrics").
"""

from __future__ import annotations

KINDS: tuple[str, ...] = (
    "beta",  # an anthropic-beta value an upstream (Bedrock) does not take
    "billing_header",  # Claude Code's x-anthropic-billing-header line removed
    "cache_control",  # prompt-caching marks an upstream cannot take
    "client_id",  # metadata.user_id, user, safety_identifier kept at the gateway
    "content_part",  # a content part the upstream's protocol cannot carry
    "hosted_tool",  # a built-in tool (web_search, ...) next to function tools
    "ignored_field",  # a request field with no counterpart upstream
    "include",  # Responses include values the upstream cannot honour
    "max_tokens",  # output tokens clamped to the endpoint, or set where required
    "other",  # a note without a kind (never written by the gateway itself)
    "prompt_cache_key",  # OpenAI's cache-routing key
    "reasoning",  # reasoning items, effort or summaries the upstream cannot take
    "sampling",  # top_k, temperature, truncation adjusted or dropped
    "stream_fragment",  # tool-call fragments after their call was closed
    "system_message",  # mid-conversation system messages folded into user turns
    "thinking",  # Anthropic thinking and effort adjusted or dropped
    "tool_output_image",  # images in tool output moved to a user message
)
"""Every value ``note_kind`` returns."""

_KNOWN = frozenset(KINDS)


def note_kind(note: str) -> str:
    """The kind of one translation note: a member of ``KINDS``, ``other`` for a plain
    string or an unknown kind."""
    kind = getattr(note, "kind", "other")
    return kind if kind in _KNOWN else "other"
