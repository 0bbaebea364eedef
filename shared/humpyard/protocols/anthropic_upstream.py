"""Anthropic Messages as an upstream protocol: chat request → Messages request, and the
Messages answer → a chat completion (pure).

The gateway's internal request is an OpenAI chat body; for a provider with
``protocol = "anthropic"`` the executor sends ``encode_request(body)`` to
``{base_url}/messages`` and reads the answer back with ``decode_response``
(streams: ``anthropic_upstream_stream``; errors: ``anthropic_errors``). What
is carried and what is noted is in docs/clients.md ("Anthropic upstreams").
"""

from __future__ import annotations

import json
import re
from typing import Any

from humpyard.protocols.anthropic import parse_arguments
from humpyard.protocols.fields import note
from humpyard.protocols.reasoning import thinking_for_effort
from humpyard.protocols.system_fold import fold_system_messages, message_text

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` sent to an Anthropic upstream when the client did not
speak Anthropic Messages itself (a provider's static header replaces it)."""

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires ``max_tokens``; this is asked for when the chat body has none."""

_DATA_URL = re.compile(r"^data:([^;,]+);base64,(.*)$", re.DOTALL)
_CARRIED = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "stop", "temperature", "top_p",
    "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort", "stream",
    "stream_options", "user",
})
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                 "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop",
                 "model_context_window_exceeded": "length"}


def encode_request(chat: dict[str, Any], *, model: str | None = None,
                   default_max_tokens: int = DEFAULT_MAX_TOKENS) -> tuple[dict, list[str]]:
    """An OpenAI chat body → ``(anthropic_messages_body, notes)``.

    Leading system messages become ``system``, later ones are folded into user
    turns (``system_fold``); tool messages become ``tool_result`` blocks at the
    start of the next user turn; images (data or https URLs) and PDF files
    become image and document blocks; ``reasoning_effort`` becomes a thinking
    budget (``reasoning.thinking_for_effort``) unless sampling settings or a
    forced tool rule it out. ``model`` replaces the body's model. Never raises
    on a body ``validate_chat`` accepted; what cannot be carried is noted.
    """
    notes: list[str] = []
    messages, folded = fold_system_messages(list(chat.get("messages") or []))
    if folded:  # as the Messages and Responses decoders say it (a chat client's are here)
        note(notes, "system_message",
             f"{folded} system message(s) inside messages folded into user turns "
             "as <system-reminder> text")
    system = ""
    if messages and messages[0].get("role") == "system":
        system = message_text(messages[0].get("content"))
        messages = messages[1:]
    out: dict[str, Any] = {"model": model or chat.get("model"),
                           "max_tokens": _max_tokens(chat, default_max_tokens, notes),
                           "messages": _turns(messages, notes)}
    if system:
        out["system"] = system
    _sampling(chat, out, notes)
    _tools(chat, out)
    _thinking(chat, out, notes)
    if chat.get("stream") is True:
        out["stream"] = True
    if isinstance(chat.get("user"), str) and chat["user"]:
        out["metadata"] = {"user_id": chat["user"]}
    for key in chat:
        if key not in _CARRIED:
            note(notes, "ignored_field", f"{key} dropped: Anthropic Messages takes none")
    return out, notes


def _max_tokens(chat: dict, default: int, notes: list[str]) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = chat.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    note(notes, "max_tokens", f"max_tokens set to {default}: Anthropic requires one")
    return default


def _sampling(chat: dict, out: dict, notes: list[str]) -> None:
    temperature = chat.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        if temperature > 1:
            note(notes, "sampling", f"temperature {temperature} lowered to 1: Anthropic's maximum")
        out["temperature"] = min(temperature, 1)
    top_p = chat.get("top_p")
    if isinstance(top_p, int | float) and not isinstance(top_p, bool):
        out["top_p"] = top_p
    stop = chat.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    stops = [s for s in stops if isinstance(s, str) and s.strip()]
    if stops:
        out["stop_sequences"] = stops


def _tools(chat: dict, out: dict) -> None:
    tools = []
    for tool in chat.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        spec: dict[str, Any] = {"name": function["name"],
                                "input_schema": function.get("parameters")
                                or {"type": "object", "properties": {}}}
        if isinstance(function.get("description"), str):
            spec["description"] = function["description"]
        tools.append(spec)
    if not tools:
        return
    out["tools"] = tools
    choice = chat.get("tool_choice")
    rule: dict[str, Any] = {"type": "auto"}
    if choice == "required":
        rule = {"type": "any"}
    elif choice == "none":
        rule = {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        rule = {"type": "tool", "name": choice["function"].get("name")}
    if chat.get("parallel_tool_calls") is False and rule["type"] != "none":
        rule["disable_parallel_tool_use"] = True
    if choice is not None or "disable_parallel_tool_use" in rule:
        out["tool_choice"] = rule


def _thinking(chat: dict, out: dict, notes: list[str]) -> None:
    effort = chat.get("reasoning_effort")
    if not isinstance(effort, str):
        return
    thinking = thinking_for_effort(effort, out["max_tokens"])
    if thinking is None:
        if effort != "none":
            note(notes, "reasoning",
                 f"reasoning_effort {effort!r} dropped: max_tokens leaves no room "
                 "for Anthropic's minimum thinking budget")
        return
    forced = out.get("tool_choice", {}).get("type") in ("any", "tool")
    if forced or "temperature" in out or "top_p" in out:
        note(notes, "reasoning",
             f"reasoning_effort {effort!r} dropped: Anthropic takes no thinking with "
             "temperature, top_p or a forced tool")
        return
    if _in_tool_loop(out["messages"]):
        # Anthropic refuses thinking when the last assistant turn's tool calls come
        # without the thinking block they were made with, which a chat or Responses
        # client never sends back: the tool loop's next turn would be a 400
        note(notes, "reasoning",
             f"reasoning_effort {effort!r} dropped: the last assistant turn's tool calls "
             "carry no thinking block, which Anthropic requires with thinking on")
        return
    out["thinking"] = thinking


def _in_tool_loop(messages: list[dict]) -> bool:
    """Whether the last assistant turn made tool calls without a thinking block first."""
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list) or not content:
            return False
        kinds = [b.get("type") for b in content if isinstance(b, dict)]
        return "tool_use" in kinds and kinds[0] not in ("thinking", "redacted_thinking")
    return False


def _turns(messages: list[dict], notes: list[str]) -> list[dict]:
    """Chat messages → alternating Anthropic turns (same-role neighbours merged)."""
    turns: list[dict] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            blocks = _assistant_blocks(message)
            turn_role = "assistant"
        elif role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": str(message.get("tool_call_id")),
                       "content": message_text(message.get("content"))}]
            turn_role = "user"
        else:
            blocks = _user_blocks(message.get("content"), notes)
            turn_role = "user"
        if not blocks:
            continue
        if turns and turns[-1]["role"] == turn_role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": turn_role, "content": blocks})
    for turn in turns:  # tool results must open their user turn
        turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    return turns


def _assistant_blocks(message: dict) -> list[dict]:
    blocks: list[dict] = []
    text = message_text(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            blocks.append({"type": "tool_use", "id": str(call.get("id")),
                           "name": str(function.get("name")),
                           "input": parse_arguments(function.get("arguments"))})
    return blocks


def _user_blocks(content: Any, notes: list[str]) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url" and isinstance(part.get("image_url"), dict):
            blocks.append({"type": "image", "source": _source(part["image_url"].get("url"))})
        elif kind == "file" and isinstance(part.get("file"), dict):
            data = _DATA_URL.match(str(part["file"].get("file_data") or ""))
            if data:
                blocks.append({"type": "document", "source": {
                    "type": "base64", "media_type": data.group(1), "data": data.group(2)}})
            else:
                note(notes, "content_part",
                     "a file part without inline data dropped: Anthropic needs the bytes")
        else:
            note(notes, "content_part",
                 f"a {kind!r} content part dropped: Anthropic Messages takes none")
    return blocks


def _source(url: Any) -> dict:
    match = _DATA_URL.match(url) if isinstance(url, str) else None
    if match:
        return {"type": "base64", "media_type": match.group(1), "data": match.group(2)}
    return {"type": "url", "url": str(url)}


# --- answers ---------------------------------------------------------------------


def chat_usage(usage: Any) -> dict:
    """Anthropic usage → OpenAI chat usage, keeping the cache counts.

    ``prompt_tokens`` counts every input token, cached or not (as OpenAI
    does): ``input_tokens + cache_read_input_tokens +
    cache_creation_input_tokens``. Cache reads are also
    ``prompt_tokens_details.cached_tokens``; both cache counts are kept under
    Anthropic's names, for pricing.
    """
    usage = usage if isinstance(usage, dict) else {}

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
    prompt = count("input_tokens") + read + written
    completion = count("output_tokens")
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": read},
            "cache_read_input_tokens": read, "cache_creation_input_tokens": written}


def finish_reason(stop_reason: Any) -> str:
    """Anthropic ``stop_reason`` → OpenAI ``finish_reason`` (``stop`` when unknown)."""
    return _STOP_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def decode_response(message: dict, *, created: int = 0) -> dict:
    """An Anthropic ``message`` → an OpenAI chat completion.

    Text blocks join into ``content``, ``tool_use`` blocks become
    ``tool_calls`` (arguments as JSON text), thinking blocks join into
    ``reasoning_content``. Never raises on odd input.
    """
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict] = []
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif kind == "tool_use":
            arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
            calls.append({"id": str(block.get("id") or f"toolu_{len(calls)}"),
                          "type": "function",
                          "function": {"name": str(block.get("name") or ""),
                                       "arguments": json.dumps(arguments,
                                                               ensure_ascii=False)}})
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        reply["tool_calls"] = calls
    elif reply["content"] is None:
        reply["content"] = ""
    if thinking:
        reply["reasoning_content"] = "".join(thinking)
    return {"id": str(message.get("id") or "msg"), "object": "chat.completion",
            "created": created, "model": str(message.get("model") or ""),
            "choices": [{"index": 0, "message": reply,
                         "finish_reason": finish_reason(message.get("stop_reason"))}],
            "usage": chat_usage(message.get("usage"))}
