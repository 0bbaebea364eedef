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
from typing import Any, NoReturn

from humpyard.errors import RequestError

MAX_TOKENS_LIMIT = 1_000_000
"""``max_tokens`` above this is refused: no model accepts it."""

_HANDLED_FIELDS = frozenset({
    "model", "max_tokens", "system", "messages", "tools", "tool_choice", "stop_sequences",
    "temperature", "top_p", "top_k", "metadata", "stream", "thinking",
})
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


def _fail(path: str, problem: str) -> NoReturn:
    raise RequestError(f"{path}: {problem}")


def _note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def _req_str(obj: dict, key: str, path: str) -> str:
    value = obj.get(key)
    if value is None:
        _fail(f"{path}.{key}", "required")
    if not isinstance(value, str):
        _fail(f"{path}.{key}", "must be a string")
    return value


def _number(body: dict, key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(key, "must be a number")
    if not low <= value <= high:
        _fail(key, f"must be between {low:g} and {high:g}, got {value}")
    return value


# --- requests ----------------------------------------------------------------


def decode_request(body: dict) -> tuple[dict, list[str]]:
    """Validate an Anthropic Messages body; return ``(openai_chat_body, notes)``.

    The OpenAI body carries ``model`` unchanged (the gateway rewrites it per
    target) and ``max_tokens``; a system prompt becomes the leading system
    message; each user turn's ``tool_result`` blocks become ``role: tool``
    messages placed before the rest of that turn. Fields the upstream cannot
    take are dropped and each drop is described once in ``notes``. Unknown
    top-level fields are ignored with a note, never refused.

    Raises ``RequestError`` naming the field for anything malformed.
    """
    if not isinstance(body, dict):
        _fail("body", "must be a JSON object")
    notes: list[str] = []
    model = body.get("model")
    if model is None:
        _fail("model", "required")
    if not isinstance(model, str) or not model:
        _fail("model", "must be a non-empty string")
    messages = []
    system = _decode_system(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    messages += _decode_messages(body.get("messages"), notes)
    out: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": _decode_max_tokens(body.get("max_tokens")),
    }
    _decode_sampling(body, out, notes)
    _decode_tools(body, out)
    _decode_options(body, out, notes)
    for key in body:
        if key not in _HANDLED_FIELDS:
            _note(notes, f"{key} ignored: not translated to the upstream")
    return out, notes


def _decode_max_tokens(value: Any) -> int:
    if value is None:
        _fail("max_tokens", "required")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail("max_tokens", "must be a positive integer")
    if value > MAX_TOKENS_LIMIT:
        _fail("max_tokens", f"{value} is over the limit of {MAX_TOKENS_LIMIT}")
    return value


def _decode_system(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        _fail("system", "must be a string or a list of text blocks")
    texts = []
    for i, block in enumerate(system):
        path = f"system[{i}]"
        if _block_type(block, path) != "text":
            _fail(f"{path}.type", f"must be 'text', got {block['type']!r}")
        texts.append(_req_str(block, "text", path))
    return "\n".join(texts)


def _block_type(block: Any, path: str) -> str:
    if not isinstance(block, dict):
        _fail(path, "must be an object")
    return _req_str(block, "type", path)


def _blocks(msg: dict, path: str) -> str | list[dict]:
    content = msg.get("content")
    if content is None:
        _fail(f"{path}.content", "required")
    if not isinstance(content, str | list):
        _fail(f"{path}.content", "must be a string or a list of content blocks")
    return content


def _decode_messages(raw: Any, notes: list[str]) -> list[dict]:
    if raw is None:
        _fail("messages", "required")
    if not isinstance(raw, list) or not raw:
        _fail("messages", "must be a non-empty list")
    out: list[dict] = []
    for i, msg in enumerate(raw):
        path = f"messages[{i}]"
        if not isinstance(msg, dict):
            _fail(path, "must be an object")
        role = msg.get("role")
        if role == "user":
            out += _decode_user_turn(_blocks(msg, path), path, notes)
        elif role == "assistant":
            out.append(_decode_assistant_turn(_blocks(msg, path), path, notes))
        else:
            _fail(f"{path}.role", f"must be 'user' or 'assistant', got {role!r}")
    return out


def _decode_user_turn(content: str | list[dict], path: str, notes: list[str]) -> list[dict]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[dict] = []
    moved: list[dict] = []
    parts: list[dict] = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        kind = _block_type(block, bpath)
        if kind == "text":
            parts.append({"type": "text", "text": _req_str(block, "text", bpath)})
        elif kind == "image":
            parts.append(_decode_image(block, bpath))
        elif kind == "document":
            parts.append(_decode_document(block, bpath))
        elif kind == "tool_result":
            message, images = _decode_tool_result(block, bpath)
            tool_messages.append(message)
            moved += images
        elif kind in ("tool_use", "thinking", "redacted_thinking"):
            _fail(f"{bpath}.type", f"'{kind}' blocks belong in assistant turns")
        else:
            _fail(f"{bpath}.type", f"unknown block type {kind!r}")
    if moved:
        _note(notes, "tool_result images moved to a user message: OpenAI tool messages carry text")
    parts = moved + parts
    if tool_messages and not parts:
        return tool_messages
    if all(p["type"] == "text" for p in parts):
        return [*tool_messages, {"role": "user", "content": "\n".join(p["text"] for p in parts)}]
    return [*tool_messages, {"role": "user", "content": parts}]


def _decode_image(block: dict, path: str) -> dict:
    source = block.get("source")
    if not isinstance(source, dict):
        _fail(f"{path}.source", "required object")
    kind = source.get("type")
    spath = f"{path}.source"
    if kind == "base64":
        media_type = _req_str(source, "media_type", spath)
        url = f"data:{media_type};base64,{_req_str(source, 'data', spath)}"
    elif kind == "url":
        url = _req_str(source, "url", spath)
    else:
        _fail(f"{spath}.type", f"unsupported image source {kind!r} (base64 and url are)")
    return {"type": "image_url", "image_url": {"url": url}}


def _decode_document(block: dict, path: str) -> dict:
    """Plain-text documents become text; base64 PDFs become an OpenAI ``file`` part."""
    source = block.get("source")
    spath = f"{path}.source"
    if not isinstance(source, dict):
        _fail(spath, "required object")
    kind = source.get("type")
    if kind == "text":
        return {"type": "text", "text": _req_str(source, "data", spath)}
    if kind == "base64":
        media_type = _req_str(source, "media_type", spath)
        data = f"data:{media_type};base64,{_req_str(source, 'data', spath)}"
        title = block.get("title")
        filename = title if isinstance(title, str) and title else "document.pdf"
        return {"type": "file", "file": {"filename": filename, "file_data": data}}
    _fail(f"{spath}.type", f"unsupported document source {kind!r} (text and base64 are)")


def _decode_tool_result(block: dict, path: str) -> tuple[dict, list[dict]]:
    """One ``tool_result`` → a ``role: tool`` message and any images it held."""
    call_id = _req_str(block, "tool_use_id", path)
    content = block.get("content", "")
    texts: list[str] = []
    images: list[dict] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for k, sub in enumerate(content):
            spath = f"{path}.content[{k}]"
            kind = _block_type(sub, spath)
            if kind == "text":
                texts.append(_req_str(sub, "text", spath))
            elif kind == "image":
                images.append(_decode_image(sub, spath))
            else:
                _fail(f"{spath}.type", f"unsupported block type {kind!r} in a tool_result")
    else:
        _fail(f"{path}.content", "must be a string or a list of blocks")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        _fail(f"{path}.is_error", "must be a boolean")
    text = "\n".join(texts)
    if is_error:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _decode_assistant_turn(content: str | list[dict], path: str, notes: list[str]) -> dict:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict] = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        kind = _block_type(block, bpath)
        if kind == "text":
            texts.append(_req_str(block, "text", bpath))
        elif kind == "tool_use":
            calls.append(_decode_tool_use(block, bpath))
        elif kind in ("thinking", "redacted_thinking"):
            _note(notes, "thinking blocks in history dropped: the upstream takes none")
        elif kind in ("tool_result", "image", "document"):
            _fail(f"{bpath}.type", f"'{kind}' blocks belong in user turns")
        else:
            _fail(f"{bpath}.type", f"unknown block type {kind!r}")
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _decode_tool_use(block: dict, path: str) -> dict:
    call_id = _req_str(block, "id", path)
    name = _req_str(block, "name", path)
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        _fail(f"{path}.input", "must be an object")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _decode_sampling(body: dict, out: dict, notes: list[str]) -> None:
    for key in ("temperature", "top_p"):
        value = _number(body, key, 0.0, 1.0)
        if value is not None:
            out[key] = value
    top_k = body.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            _fail("top_k", "must be a non-negative integer")
        _note(notes, "top_k dropped: the upstream takes no top_k parameter")
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            _fail("stop_sequences", "must be a list of strings")
        if stops:
            out["stop"] = list(stops)


def _decode_tools(body: dict, out: dict) -> None:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        _fail("tools", "must be a list")
    names: list[str] = []
    for i, tool in enumerate(tools or []):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            _fail(path, "must be an object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            _fail(f"{path}.type", f"server tool {kind!r} is not supported: only client tools are")
        function: dict[str, Any] = {"name": _req_str(tool, "name", path)}
        description = tool.get("description")
        if description is not None:
            function["description"] = _req_str(tool, "description", path)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            _fail(f"{path}.input_schema", "required object")
        function["parameters"] = schema
        names.append(function["name"])
        out.setdefault("tools", []).append({"type": "function", "function": function})
    choice = body.get("tool_choice")
    if choice is not None:
        _decode_tool_choice(choice, names, out)


def _decode_tool_choice(choice: Any, names: list[str], out: dict) -> None:
    if not isinstance(choice, dict):
        _fail("tool_choice", "must be an object")
    kind = choice.get("type")
    value: str | dict
    if kind == "auto":
        value = "auto"
    elif kind == "any":
        value = "required"
    elif kind == "none":
        value = "none"
    elif kind == "tool":
        name = _req_str(choice, "name", "tool_choice")
        if name not in names:
            _fail("tool_choice.name", f"no tool named {name!r} in tools")
        value = {"type": "function", "function": {"name": name}}
    else:
        _fail("tool_choice.type", f"must be auto, any, tool or none, got {kind!r}")
    if kind == "any" and not names:
        _fail("tool_choice", "'any' needs at least one tool in tools")
    no_parallel = choice.get("disable_parallel_tool_use", False)
    if not isinstance(no_parallel, bool):
        _fail("tool_choice.disable_parallel_tool_use", "must be a boolean")
    if names:  # without tools, auto and none say nothing the upstream needs
        out["tool_choice"] = value
        if no_parallel and kind != "none":
            out["parallel_tool_calls"] = False


def _decode_options(body: dict, out: dict, notes: list[str]) -> None:
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            _fail("metadata", "must be an object")
        user_id = metadata.get("user_id")
        if user_id is not None:
            out["user"] = _req_str(metadata, "user_id", "metadata")
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            _fail("stream", "must be a boolean")
        out["stream"] = stream
        if stream:
            out["stream_options"] = {"include_usage": True}
    thinking = body.get("thinking")
    if thinking is not None:
        kind = _block_type(thinking, "thinking")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
                _fail("thinking.budget_tokens", "must be a positive integer")
        if kind != "disabled":
            _note(notes, "thinking dropped: the upstream takes no thinking parameter")


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
    ``cache_read_input_tokens`` and are left out of ``input_tokens``, as
    Anthropic counts them.
    """
    usage = usage if isinstance(usage, dict) else {}

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = count(usage.get("prompt_tokens"))
    out = {
        "input_tokens": max(prompt - cached, 0),
        "output_tokens": count(usage.get("completion_tokens")),
    }
    if cached:
        out["cache_read_input_tokens"] = cached
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
