"""OpenAI chat-completions requests: validation that names the field, and facts.

``validate_chat`` checks what the gateway relies on and the documented limits;
it never rewrites the body (the upstream sees what the client sent, with the
model replaced per endpoint).
"""

from __future__ import annotations

from typing import Any

from humpyard.errors import RequestError

MAX_MODEL_CHARS = 256
MAX_MESSAGES = 10_000
MAX_TOOLS = 512
MAX_TOKENS_LIMIT = 10_000_000
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def check_name(field: str, value: Any, limit: int = MAX_MODEL_CHARS) -> str:
    """``value`` if it is a name the gateway may log, label and match on: a
    non-empty string of at most ``limit`` characters without control characters
    (nor Unicode line or paragraph separators); else ``RequestError`` naming
    ``field`` and the limit."""
    if not isinstance(value, str) or not value:
        raise RequestError(f"{field}: required, a non-empty string")
    if len(value) > limit:
        raise RequestError(f"{field}: at most {limit} characters, got {len(value)}")
    for i, c in enumerate(value):
        if c < "\x20" or "\x7f" <= c <= "\x9f" or c in "\u2028\u2029":
            raise RequestError(f"{field}: control characters are not allowed "
                               f"(U+{ord(c):04X} at character {i})")
    return value


def validate_chat(body: Any) -> dict[str, Any]:
    """Return ``body`` if it is a usable chat request, else raise ``RequestError``."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    check_name("model", body.get("model"))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: required, a non-empty array")
    if len(messages) > MAX_MESSAGES:
        raise RequestError(f"messages: at most {MAX_MESSAGES} messages, got {len(messages)}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}]: must be an object")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise RequestError(f"messages[{i}].role: must be one of {sorted(ROLES)}, "
                               f"got {role!r}")
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise RequestError(f"messages[{i}].content: must be a string or an array")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream: must be a boolean")
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise RequestError("stream_options: must be an object")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestError("tools: must be an array")
        if len(tools) > MAX_TOOLS:
            raise RequestError(f"tools: at most {MAX_TOOLS} tools, got {len(tools)}")
    for name in ("max_tokens", "max_completion_tokens", "n"):
        v = body.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0
                              or v > MAX_TOKENS_LIMIT):
            raise RequestError(f"{name}: must be an integer from 0 to {MAX_TOKENS_LIMIT}, "
                               f"got {v!r}")
    for name in ("temperature", "top_p"):
        v = body.get(name)
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool)
                              or not 0 <= v <= 100):
            raise RequestError(f"{name}: must be a number from 0 to 100, got {v!r}")
    return body


def completion_to_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """A buffered chat completion as the stream chunks that would have produced it.

    Used when an answer had to be complete before it could be sent (a judge
    rated it) but the client asked for a stream.
    """
    base = {"id": completion.get("id", "chatcmpl-humpyard"), "object": "chat.completion.chunk",
            "created": completion.get("created", 0), "model": completion.get("model", "")}
    chunks: list[dict[str, Any]] = []
    for choice in completion.get("choices") or []:
        msg = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant"}
        if msg.get("content"):
            delta["content"] = msg["content"]
        if msg.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **tc} for i, tc in enumerate(msg["tool_calls"])]
        idx = choice.get("index", 0)
        chunks.append({**base, "choices": [{"index": idx, "delta": delta,
                                            "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": idx, "delta": {},
                                            "finish_reason": choice.get("finish_reason")}]})
    if completion.get("usage"):
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks
