"""Decoding an OpenAI Responses API request into an OpenAI chat body (pure).

``decode_request`` validates a ``POST /v1/responses`` body and returns the
chat body the upstream receives plus notes on what it could not carry, as
the Anthropic decoder does; ``response_context`` keeps what the answer must
echo (the request's options, and how tool names map back); ``decode``, what
the gateway calls, returns both, mapping the tool names once. A malformed body
raises ``RequestError`` naming the field, e.g. ``input[3].call_id: required``.
What is supported, and the decisions (no stored responses, hosted tools) are
in docs/clients.md, "Codex CLI and the Responses API".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from humpyard.protocols.fields import (
    block_type,
    boolean,
    fail,
    note,
    number,
    opt_str,
    positive_int,
    req_str,
)
from humpyard.protocols.responses_tools import ToolNames, decode_tools, tool_names
from humpyard.protocols.system_fold import fold_system_messages

MAX_OUTPUT_TOKENS_LIMIT = 10_000_000
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
ROLES = ("user", "assistant", "system", "developer")
STATELESS = ("the gateway keeps no responses: send store: false (or leave it out) and the "
             "whole conversation in input")

_HANDLED_FIELDS = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
    "max_output_tokens", "temperature", "top_p", "reasoning", "text", "metadata", "include",
    "user", "safety_identifier", "store", "previous_response_id", "prompt_cache_key",
    "stream", "stream_options", "conversation", "background", "prompt", "truncation",
})


@dataclass(frozen=True)
class ResponsesContext:
    """What the answer to one Responses request must echo, and the tool-name map."""

    model: str
    request: dict[str, Any] = field(repr=False)
    names: ToolNames = field(default_factory=ToolNames)


def response_context(body: dict[str, Any]) -> ResponsesContext:
    """The context for encoding the answer to ``body`` (call after ``decode_request``)."""
    return ResponsesContext(model=str(body.get("model") or ""), request=body,
                            names=tool_names(body.get("tools")))


def decode_request(body: Any, *, forward_user: bool = False) -> tuple[dict, list[str]]:
    """``decode`` without the context: ``(openai_chat_body, notes)``."""
    chat, notes, _ = decode(body, forward_user=forward_user)
    return chat, notes


def decode(body: Any, *, forward_user: bool = False
           ) -> tuple[dict, list[str], ResponsesContext]:
    """Validate a Responses API body; return ``(openai_chat_body, notes, context)``,
    the context being ``response_context(body)`` (the tool names mapped once).

    ``instructions`` and leading ``system``/``developer`` messages become the
    system message; later ones are folded into user turns (``system_fold``).
    ``function_call`` items become assistant tool calls (consecutive calls
    share one assistant message), ``function_call_output`` items tool
    messages; reasoning items are dropped with a note. ``user`` and
    ``safety_identifier`` are passed on only with ``forward_user``.
    ``store: true``, ``previous_response_id``, ``conversation``, ``prompt``
    and ``background`` are refused: the gateway keeps no responses.
    Raises ``RequestError`` naming the field for anything malformed.
    """
    if not isinstance(body, dict):
        fail("body", "must be a JSON object")
    notes: list[str] = []
    model = body.get("model")
    if not isinstance(model, str) or not model:
        fail("model", "required, a non-empty string")
    _refuse_state(body)
    messages: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            fail("instructions", "must be a string")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    names = tool_names(body.get("tools"))
    messages += _decode_input(body.get("input"), names, notes)
    messages, folded = fold_system_messages(messages)
    if folded:
        note(notes, "system_message",
             f"{folded} system/developer message(s) after the first turn folded into "
             "user turns as <system-reminder> text")
    if not any(m["role"] != "system" for m in messages):
        fail("input", "required: at least one message or item")
    out: dict[str, Any] = {"model": model, "messages": messages}
    decode_tools(body, out, notes)
    _decode_options(body, out, notes, forward_user)
    for key in body:
        if key not in _HANDLED_FIELDS:
            note(notes, "ignored_field", f"{key} ignored: not translated to the upstream")
    return out, notes, ResponsesContext(model=model, request=body, names=names)


def _refuse_state(body: dict) -> None:
    if body.get("store") is True:
        fail("store", f"true is not supported: {STATELESS}")
    if body.get("store") is not None and not isinstance(body["store"], bool):
        fail("store", "must be a boolean")
    for key in ("previous_response_id", "conversation", "prompt"):
        if body.get(key) is not None:
            fail(key, f"not supported: {STATELESS}")
    if body.get("background") is True:
        fail("background", "true is not supported: the gateway answers in the request")


def _decode_input(raw: Any, names: ToolNames, notes: list[str]) -> list[dict]:
    if raw is None:
        fail("input", "required")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        fail("input", "must be a string or a list of items")
    out: list[dict] = []
    for i, item in enumerate(raw):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            fail(path, "must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            message = _decode_message(item, path)
            if message is not None:
                out.append(message)
        elif kind in ("function_call", "custom_tool_call"):
            _append_call(out, _decode_call(item, path, kind, names))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out += _decode_output(item, path, notes)
        elif kind == "reasoning":
            note(notes, "reasoning", "reasoning items dropped: the upstream takes none")
            if item.get("encrypted_content") is not None:
                note(notes, "reasoning",
                     "encrypted reasoning content dropped: only OpenAI can read it")
        elif kind == "item_reference":
            fail(f"{path}.type", f"item references are not supported: {STATELESS}")
        elif kind is None:
            fail(f"{path}.type", "required")
        else:
            fail(f"{path}.type", f"{kind!r} items are not supported")
    return out


def _decode_message(item: dict, path: str) -> dict | None:
    role = item.get("role")
    if role not in ROLES:
        fail(f"{path}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        fail(f"{path}.content", "must be a string or a list of parts")
    parts = [_decode_part(part, f"{path}.content[{j}]") for j, part in enumerate(content)]
    if role == "developer":
        role = "system"
    if all(p["type"] == "text" for p in parts):
        text = "\n".join(p["text"] for p in parts)
        if role == "assistant" and not text:
            return None
        return {"role": role, "content": text}
    if role != "user":
        fail(f"{path}.content", f"images and files are only taken in user messages, not {role}")
    return {"role": role, "content": parts}


def _decode_part(part: Any, path: str) -> dict:
    kind = block_type(part, path)
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": req_str(part, "text", path)}
    if kind == "refusal":
        return {"type": "text", "text": req_str(part, "refusal", path)}
    if kind == "input_image":
        url = opt_str(part, "image_url", path)
        if url is None:
            fail(f"{path}.image_url", "required (file_id images are not supported)")
        image: dict[str, Any] = {"url": url}
        detail = opt_str(part, "detail", path)
        if detail is not None:
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        data = opt_str(part, "file_data", path)
        if data is None:
            fail(f"{path}.file_data", "required (file_id and file_url files are not supported)")
        filename = opt_str(part, "filename", path) or "document.pdf"
        return {"type": "file", "file": {"filename": filename, "file_data": data}}
    fail(f"{path}.type", f"unsupported content part {kind!r}")


def _decode_call(item: dict, path: str, kind: str, names: ToolNames) -> dict:
    call_id = req_str(item, "call_id", path)
    name = req_str(item, "name", path)
    namespace = opt_str(item, "namespace", path)
    if kind == "custom_tool_call":
        arguments = json.dumps({"input": req_str(item, "input", path)}, ensure_ascii=False)
    else:
        arguments = req_str(item, "arguments", path)
    return {"id": call_id, "type": "function",
            "function": {"name": names.chat_name(name, namespace), "arguments": arguments}}


def _append_call(out: list[dict], call: dict) -> None:
    """Join a call to the assistant message before it, else start one."""
    if out and out[-1]["role"] == "assistant":
        last = out[-1]
        out[-1] = {**last, "tool_calls": [*last.get("tool_calls", []), call]}
        if out[-1]["content"] == "":
            out[-1]["content"] = None
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _decode_output(item: dict, path: str, notes: list[str]) -> list[dict]:
    call_id = req_str(item, "call_id", path)
    output = item.get("output")
    images: list[dict] = []
    if isinstance(output, str):
        text = output
    elif isinstance(output, list):
        texts = []
        for j, part in enumerate(output):
            decoded = _decode_part(part, f"{path}.output[{j}]")
            if decoded["type"] == "text":
                texts.append(decoded["text"])
            else:
                images.append(decoded)
        text = "\n".join(texts)
    else:
        fail(f"{path}.output", "must be a string or a list of parts")
    tool = {"role": "tool", "tool_call_id": call_id, "content": text}
    if not images:
        return [tool]
    note(notes, "tool_output_image",
         "tool output images moved to a user message: OpenAI tool messages carry text")
    return [tool, {"role": "user", "content": images}]


def _decode_options(body: dict, out: dict, notes: list[str], forward_user: bool) -> None:
    limit = body.get("max_output_tokens")
    if limit is not None:
        out["max_tokens"] = positive_int(limit, "max_output_tokens", MAX_OUTPUT_TOKENS_LIMIT)
    for key, high in (("temperature", 2.0), ("top_p", 1.0)):
        value = number(body, key, 0.0, high)
        if value is not None:
            out[key] = value
    _decode_reasoning(body.get("reasoning"), out, notes)
    _decode_text(body.get("text"), out, notes)
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        fail("metadata", "must be an object")
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list) or not all(isinstance(v, str) for v in include):
            fail("include", "must be a list of strings")
        for value in include:
            note(notes, "include",
                 f"include {value!r} not honoured: the upstream returns no such data")
    for key in ("user", "safety_identifier"):
        identifier = opt_str(body, key, key)
        if identifier is not None:
            if forward_user:
                out[key] = identifier
            else:
                note(notes, "client_id",
                     f"{key} not forwarded: client identifiers stay at the gateway")
    if opt_str(body, "prompt_cache_key", "prompt_cache_key") is not None:
        note(notes, "prompt_cache_key",
             "prompt_cache_key not forwarded: it steers OpenAI's own cache routing")
    truncation = body.get("truncation")
    if truncation not in (None, "disabled", "auto"):
        fail("truncation", f"must be 'auto' or 'disabled', got {truncation!r}")
    if truncation == "auto":
        note(notes, "sampling", "truncation 'auto' ignored: the gateway does not shorten input")
    stream = boolean(body, "stream", "stream")
    if stream is not None:
        out["stream"] = stream
        if stream:
            out["stream_options"] = {"include_usage": True}


def _decode_reasoning(reasoning: Any, out: dict, notes: list[str]) -> None:
    if reasoning is None:
        return
    if not isinstance(reasoning, dict):
        fail("reasoning", "must be an object")
    effort = reasoning.get("effort")
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            fail("reasoning.effort", f"must be one of {', '.join(REASONING_EFFORTS)}, "
                                     f"got {effort!r}")
        out["reasoning_effort"] = effort
    for key in ("summary", "generate_summary"):
        if reasoning.get(key) is not None:
            note(notes, "reasoning",
                 f"reasoning.{key} ignored: the upstream returns no reasoning summaries")


def _decode_text(text: Any, out: dict, notes: list[str]) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        fail("text", "must be an object")
    fmt = text.get("format")
    if fmt is not None:
        kind = block_type(fmt, "text.format")
        if kind == "json_schema":
            schema = fmt.get("schema")
            if not isinstance(schema, dict):
                fail("text.format.schema", "required object (a JSON schema)")
            spec: dict[str, Any] = {"name": req_str(fmt, "name", "text.format"),
                                    "schema": schema}
            description = opt_str(fmt, "description", "text.format")
            if description is not None:
                spec["description"] = description
            strict = boolean(fmt, "strict", "text.format.strict")
            if strict is not None:
                spec["strict"] = strict
            out["response_format"] = {"type": "json_schema", "json_schema": spec}
        elif kind == "json_object":
            out["response_format"] = {"type": "json_object"}
        elif kind != "text":
            fail("text.format.type", f"must be text, json_schema or json_object, got {kind!r}")
    if text.get("verbosity") is not None:
        note(notes, "ignored_field", "text.verbosity ignored: not translated to the upstream")
