"""Chat-completion stream chunks as an OpenAI-compatible upstream sends them, for the
stream translators' unit tests."""

from __future__ import annotations

from typing import Any


def chunk(content: str | None = None, tool_calls: list[dict] | None = None,
          finish: str | None = None, **delta_extra: Any) -> dict:
    """One chunk whose first choice's delta has ``content``, ``tool_calls`` and
    ``delta_extra`` (e.g. ``reasoning_content``), and ``finish`` as its finish_reason."""
    delta = dict(delta_extra)
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage_chunk(prompt: int = 11, completion: int = 7, cached: int | None = None) -> dict:
    """The usage-only last chunk (``cached``: prompt_tokens_details.cached_tokens)."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": usage}


def tool_fragment(index: int, arguments: str = "", call_id: str | None = None,
                  name: str | None = None) -> dict:
    """One tool-call fragment: the first of a call carries ``call_id`` and ``name``."""
    out: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        out["id"] = call_id
        out["type"] = "function"
    if name is not None:
        out["function"]["name"] = name
    return out
