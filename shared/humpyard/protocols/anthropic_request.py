"""Decoding an Anthropic Messages request into an OpenAI chat body (pure).

``decode_request`` validates the body and returns the chat body the upstream
receives plus notes on everything it could not carry over; a malformed body
raises ``RequestError`` whose message starts with the field's path, e.g.
``messages[2].content[0].type: unknown block type 'foo'``. Content blocks are
decoded by ``anthropic_content``; what Claude Code sends and how each part is
carried is in docs/clients.md ("Claude Code").
"""

from __future__ import annotations

from typing import Any

from humpyard.protocols.anthropic_content import (
    content_of,
    decode_assistant_turn,
    decode_user_turn,
    system_text,
)
from humpyard.protocols.fields import block_type, fail, note, number, positive_int, req_str
from humpyard.protocols.reasoning import ANTHROPIC_EFFORTS, effort_from_anthropic
from humpyard.protocols.system_fold import fold_system_messages

MAX_TOKENS_LIMIT = 1_000_000
BILLING_HEADER = "x-anthropic-billing-header:"
"""How Claude Code's per-conversation billing line starts (the system prompt's first line)."""

_HANDLED_FIELDS = frozenset({
    "model", "max_tokens", "system", "messages", "tools", "tool_choice", "stop_sequences",
    "temperature", "top_p", "top_k", "metadata", "stream", "thinking", "output_config",
    "cache_control",
})
_THINKING_TYPES = ("enabled", "adaptive", "disabled")


def decode_request(body: dict, *, keep_billing_header: bool = False,
                   forward_user: bool = False) -> tuple[dict, list[str]]:
    """Validate an Anthropic Messages body; return ``(openai_chat_body, notes)``.

    The OpenAI body carries ``model`` unchanged (the gateway rewrites it per
    target) and ``max_tokens``; the system prompt becomes the leading system
    message, and ``role: "system"`` messages inside ``messages`` are folded
    into the neighbouring user turn (``system_fold``); each user turn's
    ``tool_result`` blocks become ``role: tool`` messages placed before the
    rest of that turn. ``output_config.effort`` and ``thinking`` become
    ``reasoning_effort`` (``reasoning.effort_from_anthropic``).

    Claude Code's ``x-anthropic-billing-header`` line at the start of the
    system prompt changes with every conversation and would defeat the
    upstream's prefix cache: it is removed unless ``keep_billing_header``.
    ``metadata.user_id`` is passed on as OpenAI ``user`` only with
    ``forward_user``. Fields the upstream cannot take (``cache_control``,
    ``top_k``, thinking blocks, ...) are dropped and each drop is described
    once in ``notes``; unknown top-level fields are ignored with a note,
    never refused.

    Raises ``RequestError`` naming the field for anything malformed.
    """
    if not isinstance(body, dict):
        fail("body", "must be a JSON object")
    notes: list[str] = []
    model = body.get("model")
    if model is None:
        fail("model", "required")
    if not isinstance(model, str) or not model:
        fail("model", "must be a non-empty string")
    system = _decode_system(body.get("system"), keep_billing_header, notes)
    messages = [{"role": "system", "content": system}] if system else []
    messages += _decode_messages(body.get("messages"), notes)
    messages, folded = fold_system_messages(messages)
    if folded:
        note(notes, "system_message",
             f"{folded} system message(s) inside messages folded into user turns "
             "as <system-reminder> text")
    out: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": _decode_max_tokens(body.get("max_tokens")),
    }
    _decode_sampling(body, out, notes)
    _decode_tools(body, out)
    _decode_options(body, out, notes, forward_user)
    _decode_reasoning(body, out, notes)
    if _has_cache_control(body):
        note(notes, "cache_control",
             "cache_control dropped: the upstream takes no prompt-caching marks")
    for key in body:
        if key not in _HANDLED_FIELDS:
            note(notes, "ignored_field", f"{key} ignored: not translated to the upstream")
    return out, notes


def _decode_max_tokens(value: Any) -> int:
    if value is None:
        fail("max_tokens", "required")
    return positive_int(value, "max_tokens", MAX_TOKENS_LIMIT)


def _decode_system(system: Any, keep_billing_header: bool, notes: list[str]) -> str:
    if system is None or isinstance(system, str):
        texts = [system] if system else []
    elif isinstance(system, list):
        texts = []
        for i, block in enumerate(system):
            path = f"system[{i}]"
            if block_type(block, path) != "text":
                fail(f"{path}.type", f"must be 'text', got {block['type']!r}")
            texts.append(req_str(block, "text", path))
    else:
        fail("system", "must be a string or a list of text blocks")
    if texts and texts[0].startswith(BILLING_HEADER) and not keep_billing_header:
        rest = texts[0].split("\n", 1)[1] if "\n" in texts[0] else ""
        texts = ([rest] if rest else []) + texts[1:]
        note(notes, "billing_header",
             "x-anthropic-billing-header line removed from the system prompt")
    return "\n".join(texts)


def _decode_messages(raw: Any, notes: list[str]) -> list[dict]:
    if raw is None:
        fail("messages", "required")
    if not isinstance(raw, list) or not raw:
        fail("messages", "must be a non-empty list")
    out: list[dict] = []
    for i, msg in enumerate(raw):
        path = f"messages[{i}]"
        if not isinstance(msg, dict):
            fail(path, "must be an object")
        role = msg.get("role")
        if role == "user":
            out += decode_user_turn(content_of(msg, path), path, notes)
        elif role == "assistant":
            out.append(decode_assistant_turn(content_of(msg, path), path, notes))
        elif role == "system":
            out.append({"role": "system", "content": system_text(content_of(msg, path), path)})
        else:
            fail(f"{path}.role", f"must be 'user', 'assistant' or 'system', got {role!r}")
    return out


def _decode_sampling(body: dict, out: dict, notes: list[str]) -> None:
    for key in ("temperature", "top_p"):
        value = number(body, key, 0.0, 1.0)
        if value is not None:
            out[key] = value
    top_k = body.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            fail("top_k", "must be a non-negative integer")
        note(notes, "sampling", "top_k dropped: the upstream takes no top_k parameter")
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            fail("stop_sequences", "must be a list of strings")
        if stops:
            out["stop"] = list(stops)


def _decode_tools(body: dict, out: dict) -> None:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        fail("tools", "must be a list")
    names: list[str] = []
    for i, tool in enumerate(tools or []):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            fail(path, "must be an object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            fail(f"{path}.type", f"server tool {kind!r} is not supported: only client tools are")
        function: dict[str, Any] = {"name": req_str(tool, "name", path)}
        description = tool.get("description")
        if description is not None:
            function["description"] = req_str(tool, "description", path)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            fail(f"{path}.input_schema", "required object")
        function["parameters"] = schema
        names.append(function["name"])
        out.setdefault("tools", []).append({"type": "function", "function": function})
    choice = body.get("tool_choice")
    if choice is not None:
        _decode_tool_choice(choice, names, out)


def _decode_tool_choice(choice: Any, names: list[str], out: dict) -> None:
    if not isinstance(choice, dict):
        fail("tool_choice", "must be an object")
    kind = choice.get("type")
    value: str | dict
    if kind == "auto":
        value = "auto"
    elif kind == "any":
        value = "required"
    elif kind == "none":
        value = "none"
    elif kind == "tool":
        name = req_str(choice, "name", "tool_choice")
        if name not in names:
            fail("tool_choice.name", f"no tool named {name!r} in tools")
        value = {"type": "function", "function": {"name": name}}
    else:
        fail("tool_choice.type", f"must be auto, any, tool or none, got {kind!r}")
    if kind == "any" and not names:
        fail("tool_choice", "'any' needs at least one tool in tools")
    no_parallel = choice.get("disable_parallel_tool_use", False)
    if not isinstance(no_parallel, bool):
        fail("tool_choice.disable_parallel_tool_use", "must be a boolean")
    if names:  # without tools, auto and none say nothing the upstream needs
        out["tool_choice"] = value
        if no_parallel and kind != "none":
            out["parallel_tool_calls"] = False


def _decode_options(body: dict, out: dict, notes: list[str], forward_user: bool) -> None:
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            fail("metadata", "must be an object")
        if metadata.get("user_id") is not None:
            user_id = req_str(metadata, "user_id", "metadata")
            if forward_user:
                out["user"] = user_id
            else:
                note(notes, "client_id",
                     "metadata.user_id not forwarded: client identifiers stay at the "
                     "gateway")
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            fail("stream", "must be a boolean")
        out["stream"] = stream
        if stream:
            out["stream_options"] = {"include_usage": True}


def _decode_reasoning(body: dict, out: dict, notes: list[str]) -> None:
    """``output_config.effort`` and ``thinking`` → ``reasoning_effort``."""
    effort = None
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict):
            fail("output_config", "must be an object")
        effort = config.get("effort")
        if effort is not None and effort not in ANTHROPIC_EFFORTS:
            fail("output_config.effort", f"must be one of {', '.join(ANTHROPIC_EFFORTS)}, "
                                         f"got {effort!r}")
        for key in config:
            if key != "effort":
                note(notes, "ignored_field",
                     f"output_config.{key} ignored: not translated to the upstream")
    kind, budget = None, None
    thinking = body.get("thinking")
    if thinking is not None:
        kind = block_type(thinking, "thinking")
        if kind not in _THINKING_TYPES:
            fail("thinking.type", f"must be one of {', '.join(_THINKING_TYPES)}, got {kind!r}")
        if kind == "enabled":
            budget = positive_int(thinking.get("budget_tokens"), "thinking.budget_tokens",
                                  MAX_TOKENS_LIMIT)
    mapped = effort_from_anthropic(effort, kind, budget)
    if mapped is not None:
        out["reasoning_effort"] = mapped
        note(notes, "thinking", f"thinking/effort sent as reasoning_effort {mapped!r}")
    elif kind in ("enabled", "adaptive"):
        note(notes, "thinking",
             "thinking dropped: no effort to pass on; the upstream's default applies")


def _has_cache_control(body: dict) -> bool:
    """Whether any block, tool or the request itself carries ``cache_control``."""
    if "cache_control" in body:
        return True
    system = body.get("system")
    blocks: list[Any] = list(system) if isinstance(system, list) else []
    tools = body.get("tools")
    blocks += tools if isinstance(tools, list) else []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            blocks.append(block)
            inner = block.get("content") if isinstance(block, dict) else None
            blocks += inner if isinstance(inner, list) else []
    return any(isinstance(b, dict) and "cache_control" in b for b in blocks)
