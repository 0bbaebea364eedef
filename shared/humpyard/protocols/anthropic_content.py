"""Anthropic message content → OpenAI chat messages (pure): one turn at a time.

Used by ``anthropic_request.decode_request``. A user turn's ``tool_result``
blocks become ``role: tool`` messages placed before the rest of the turn;
images, documents and tool calls become their OpenAI equivalents. Each
function refuses a malformed block with a ``RequestError`` naming its path.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.protocols.fields import block_type, fail, note, req_str


def content_of(msg: dict, path: str) -> str | list[dict]:
    """A message's ``content``: a string or a list of blocks."""
    content = msg.get("content")
    if content is None:
        fail(f"{path}.content", "required")
    if not isinstance(content, str | list):
        fail(f"{path}.content", "must be a string or a list of content blocks")
    return content


def system_text(content: str | list[dict], path: str) -> str:
    """The text of a ``role: system`` message: a string or text blocks, joined by newlines."""
    if isinstance(content, str):
        return content
    texts = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        kind = block_type(block, bpath)
        if kind != "text":
            fail(f"{bpath}.type", f"must be 'text' in a system message, got {kind!r}")
        texts.append(req_str(block, "text", bpath))
    return "\n".join(texts)


def decode_user_turn(content: str | list[dict], path: str, notes: list[str]) -> list[dict]:
    """A user turn → ``role: tool`` messages (its tool results), then one user message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[dict] = []
    moved: list[dict] = []
    parts: list[dict] = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        kind = block_type(block, bpath)
        if kind == "text":
            parts.append({"type": "text", "text": req_str(block, "text", bpath)})
        elif kind == "image":
            parts.append(decode_image(block, bpath))
        elif kind == "document":
            parts.append(_decode_document(block, bpath))
        elif kind == "tool_result":
            message, images = _decode_tool_result(block, bpath)
            tool_messages.append(message)
            moved += images
        elif kind in ("tool_use", "thinking", "redacted_thinking"):
            fail(f"{bpath}.type", f"'{kind}' blocks belong in assistant turns")
        else:
            fail(f"{bpath}.type", f"unknown block type {kind!r}")
    if moved:
        note(notes, "tool_output_image",
             "tool_result images moved to a user message: OpenAI tool messages carry text")
    parts = moved + parts
    if tool_messages and not parts:
        return tool_messages
    if all(p["type"] == "text" for p in parts):
        return [*tool_messages, {"role": "user", "content": "\n".join(p["text"] for p in parts)}]
    return [*tool_messages, {"role": "user", "content": parts}]


def decode_image(block: dict, path: str) -> dict:
    """An ``image`` block (base64 or url source) → an ``image_url`` part."""
    source = block.get("source")
    if not isinstance(source, dict):
        fail(f"{path}.source", "required object")
    kind = source.get("type")
    spath = f"{path}.source"
    if kind == "base64":
        media_type = req_str(source, "media_type", spath)
        url = f"data:{media_type};base64,{req_str(source, 'data', spath)}"
    elif kind == "url":
        url = req_str(source, "url", spath)
    else:
        fail(f"{spath}.type", f"unsupported image source {kind!r} (base64 and url are)")
    return {"type": "image_url", "image_url": {"url": url}}


def _decode_document(block: dict, path: str) -> dict:
    """Plain-text documents become text; base64 PDFs become an OpenAI ``file`` part."""
    source = block.get("source")
    spath = f"{path}.source"
    if not isinstance(source, dict):
        fail(spath, "required object")
    kind = source.get("type")
    if kind == "text":
        return {"type": "text", "text": req_str(source, "data", spath)}
    if kind == "base64":
        media_type = req_str(source, "media_type", spath)
        data = f"data:{media_type};base64,{req_str(source, 'data', spath)}"
        title = block.get("title")
        filename = title if isinstance(title, str) and title else "document.pdf"
        return {"type": "file", "file": {"filename": filename, "file_data": data}}
    fail(f"{spath}.type", f"unsupported document source {kind!r} (text and base64 are)")


def _decode_tool_result(block: dict, path: str) -> tuple[dict, list[dict]]:
    """One ``tool_result`` → a ``role: tool`` message and any images it held."""
    call_id = req_str(block, "tool_use_id", path)
    content = block.get("content", "")
    texts: list[str] = []
    images: list[dict] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for k, sub in enumerate(content):
            spath = f"{path}.content[{k}]"
            kind = block_type(sub, spath)
            if kind == "text":
                texts.append(req_str(sub, "text", spath))
            elif kind == "image":
                images.append(decode_image(sub, spath))
            else:
                fail(f"{spath}.type", f"unsupported block type {kind!r} in a tool_result")
    else:
        fail(f"{path}.content", "must be a string or a list of blocks")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        fail(f"{path}.is_error", "must be a boolean")
    text = "\n".join(texts)
    if is_error:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def decode_assistant_turn(content: str | list[dict], path: str, notes: list[str]) -> dict:
    """An assistant turn → one assistant message with its text and tool calls."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict] = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        kind = block_type(block, bpath)
        if kind == "text":
            texts.append(req_str(block, "text", bpath))
        elif kind == "tool_use":
            calls.append(_decode_tool_use(block, bpath))
        elif kind in ("thinking", "redacted_thinking"):
            note(notes, "thinking", "thinking blocks in history dropped: the upstream takes none")
        elif kind in ("tool_result", "image", "document"):
            fail(f"{bpath}.type", f"'{kind}' blocks belong in user turns")
        else:
            fail(f"{bpath}.type", f"unknown block type {kind!r}")
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _decode_tool_use(block: dict, path: str) -> dict:
    call_id = req_str(block, "id", path)
    name = req_str(block, "name", path)
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        fail(f"{path}.input", "must be an object")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }
