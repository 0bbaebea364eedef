"""Decoding an Anthropic Messages request into an OpenAI chat body (pure).

``decode_request`` validates the body and returns the chat body the upstream
receives plus notes on everything it could not carry over; a malformed body
raises ``RequestError`` whose message starts with the field's path, e.g.
``messages[2].content[0].type: unknown block type 'foo'``.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from humpyard.errors import RequestError

MAX_TOKENS_LIMIT = 1_000_000

_HANDLED_FIELDS = frozenset({
    "model", "max_tokens", "system", "messages", "tools", "tool_choice", "stop_sequences",
    "temperature", "top_p", "top_k", "metadata", "stream", "thinking",
})
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
