"""Anthropic Messages <-> OpenAI Chat Completions, as pure functions (no I/O).

- ``decode_request`` validates an Anthropic Messages body and returns the
  OpenAI chat body the upstream receives, plus notes on everything it could not
  carry over (``top_k``, ``thinking``, thinking blocks in history, ...). A
  malformed body raises ``RequestError`` whose message starts with the field's
  path, e.g. ``messages[2].content[0].type: unknown block type 'foo'``.
- ``encode_response`` turns a buffered OpenAI chat completion into an Anthropic
  ``message``; it never raises on odd upstream output (bad tool arguments
  become ``{}``).
- ``map_stop_reason``, ``stop_sequence_hit`` and ``encode_usage`` are shared
  with the streaming translator in ``anthropic_stream``.
- ``error_body`` is Anthropic's error shape for a status and message.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from humpyard.protocols.anthropic_request import MAX_TOKENS_LIMIT, decode_request

__all__ = ["MAX_TOKENS_LIMIT", "decode_request", "encode_response", "error_body",
           "map_stop_reason"]

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# 503 stays api_error: the gateway's own 503s mean "no target may serve" (an
# override, the policy), not load shedding; Claude Code treats overloaded_error
# as a 529 and may switch models. Only a real 529 is overloaded_error.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
ERROR_TYPES = frozenset(_ERROR_TYPES.values())
"""Anthropic's error types (an upstream's own is passed on when it is one of them)."""


# --- responses ---------------------------------------------------------------


def map_stop_reason(finish_reason: str | None, stop_sequence_hit: bool = False) -> str:
    """OpenAI ``finish_reason`` → Anthropic ``stop_reason``.

    ``stop`` is ``end_turn``, or ``stop_sequence`` when the caller knows one of
    the request's stop sequences ended the output; ``length`` → ``max_tokens``;
    ``tool_calls``/``function_call`` → ``tool_use``; ``content_filter`` →
    ``refusal``; ``None`` and anything unknown → ``end_turn``.
    """
    if finish_reason == "stop" and stop_sequence_hit:
        return "stop_sequence"
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn")


def stop_sequence_hit(text: str, stop_sequences: list[str] | None) -> str | None:
    """The longest of ``stop_sequences`` that ``text`` ends with, else ``None``.

    OpenAI leaves the matched stop string out of the output and does not say
    which one matched, so this only finds upstreams that keep it in the text.
    """
    hits = [s for s in stop_sequences or [] if s and text.endswith(s)]
    return max(hits, key=len) if hits else None


def matched_stop_sequence(choice: dict, text: str, stop_sequences: list[str] | None) -> str | None:
    """Which request stop sequence ended a choice, if the upstream lets us tell.

    vLLM names the stop string in ``choice.stop_reason``; otherwise fall back to
    ``stop_sequence_hit`` on the text.
    """
    named = choice.get("stop_reason")
    if isinstance(named, str) and named in (stop_sequences or []):
        return named
    return stop_sequence_hit(text, stop_sequences)


def encode_usage(usage: Any) -> dict:
    """OpenAI ``usage`` → Anthropic usage; missing or odd values count as 0.

    Cached prompt tokens (``prompt_tokens_details.cached_tokens``) become
    ``cache_read_input_tokens`` and cache writes (``cache_creation_input_tokens``,
    as ``anthropic_upstream.chat_usage`` keeps them, or an OpenAI-style upstream's
    ``prompt_tokens_details.cache_write_tokens``, as ``ledger.decision.token_counts``
    reads them) ``cache_creation_input_tokens``; both are left out of
    ``input_tokens``, as Anthropic counts them.
    """
    usage = usage if isinstance(usage, dict) else {}

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    written = count(usage.get("cache_creation_input_tokens")) or (
        count(details.get("cache_write_tokens")) if isinstance(details, dict) else 0)
    prompt = count(usage.get("prompt_tokens"))
    out = {
        "input_tokens": max(prompt - cached - written, 0),
        "output_tokens": count(usage.get("completion_tokens")),
    }
    if cached:
        out["cache_read_input_tokens"] = cached
    if written:
        out["cache_creation_input_tokens"] = written
    return out


def message_id_for(openai: dict) -> str:
    """A stable ``msg_`` id for an upstream response: from its id, else a content hash."""
    upstream = openai.get("id")
    if isinstance(upstream, str) and upstream:
        if upstream.startswith("msg_"):
            return upstream
        return "msg_" + re.sub(r"[^A-Za-z0-9_-]", "", upstream)
    digest = hashlib.sha256(json.dumps(openai, sort_keys=True, default=str).encode())
    return "msg_" + digest.hexdigest()[:24]


def parse_arguments(arguments: Any) -> dict:
    """Tool-call arguments → a dict; anything that is not a JSON object becomes ``{}``."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def encode_response(
    openai: dict,
    *,
    model: str,
    stop_sequences: list[str] | None = None,
    message_id: str | None = None,
    include_thinking: bool = False,
) -> dict:
    """A buffered OpenAI chat completion → an Anthropic ``message`` body.

    Only ``choices[0]`` is read. Text becomes a text block, each tool call a
    ``tool_use`` block (bad arguments become ``{}``), and, with
    ``include_thinking``, ``reasoning_content``/``reasoning`` a leading
    ``thinking`` block with an empty signature. Tool calls make the stop
    reason ``tool_use`` even if the upstream said ``stop``. Never raises on
    missing or odd fields; a response without choices gives empty content.
    """
    choices = openai.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    msg_id = message_id or message_id_for(openai)
    content: list[dict] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if include_thinking and isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = _message_text(message)
    refusal = message.get("refusal")
    refused = False
    if not text and isinstance(refusal, str) and refusal:
        text, refused = refusal, True
    if text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        content.append(_encode_tool_use(call, msg_id, i))
    stop = matched_stop_sequence(choice, text, stop_sequences)
    reason = map_stop_reason(choice.get("finish_reason"), stop is not None)
    if refused:
        reason = "refusal"
    elif reason == "end_turn" and any(b["type"] == "tool_use" for b in content):
        reason = "tool_use"
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": stop if reason == "stop_sequence" else None,
        "usage": encode_usage(openai.get("usage")),
    }


def _message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def _encode_tool_use(call: Any, msg_id: str, i: int) -> dict:
    call = call if isinstance(call, dict) else {}
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    call_id = call.get("id")
    name = function.get("name")
    return {
        "type": "tool_use",
        "id": call_id if isinstance(call_id, str) and call_id else tool_use_id(msg_id, i),
        "name": name if isinstance(name, str) else "",
        "input": parse_arguments(function.get("arguments")),
    }


def tool_use_id(message_id: str, i: int) -> str:
    """The id given to the ``i``-th tool call of a message when the upstream gave none."""
    return f"toolu_{message_id.removeprefix('msg_')}_{i}"


def error_type_for(status: int) -> str:
    """Anthropic error type for an HTTP status.

    400 invalid_request_error, 401 authentication_error, 402 billing_error,
    403 permission_error, 404 not_found_error, 413 request_too_large,
    429 rate_limit_error, 504 timeout_error, 529 overloaded_error; any other
    4xx invalid_request_error; 500, 502, 503 and any other status api_error.
    """
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_body(status: int, message: str) -> dict:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type_for(status), "message": message}}
