"""Amazon Bedrock as an upstream protocol: what is sent, and the answers read (pure).

A provider with ``protocol = "bedrock"`` serves a target endpoint whose
``model`` is a Bedrock model id, an inference profile id (``us.…``,
``global.…``) or an ARN; it is URL-encoded into the path (``model_path``).

- Anthropic models (``is_anthropic``): InvokeModel
  (``/model/{id}/invoke``) and InvokeModelWithResponseStream
  (``/invoke-with-response-stream``) with the Anthropic Messages body
  (``invoke_body``): no ``model``, no ``stream``,
  ``anthropic_version: "bedrock-2023-05-31"`` and the client's
  ``anthropic-beta`` values as the ``anthropic_beta`` list, filtered by
  ``BETAS`` (``bedrock_betas``). The answers are Anthropic Messages answers
  and events, read as an Anthropic upstream's.
- Other models: Converse (``/converse``) and ConverseStream
  (``/converse-stream``). The chat body is first translated to Anthropic
  Messages (``anthropic_upstream.encode_request``, as for an Anthropic
  upstream), then to Converse (``converse_request``); a Converse answer comes
  back as an Anthropic message (``converse_message``) and ConverseStream
  events as Anthropic events (``ConverseEvents``), so one reader serves both.

docs/upstream.md ("Amazon Bedrock") and docs/decisions/0022-bedrock-upstream.md.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from humpyard.protocols.fields import note

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"

BETAS: dict[str, str] = {
    "computer-use-2024-10-22": "computer-use-2024-10-22",
    "computer-use-2025-01-24": "computer-use-2025-01-24",
    "computer-use-2025-11-24": "computer-use-2025-11-24",
    "token-efficient-tools-2025-02-19": "token-efficient-tools-2025-02-19",
    "interleaved-thinking-2025-05-14": "interleaved-thinking-2025-05-14",
    "output-128k-2025-02-19": "output-128k-2025-02-19",
    "dev-full-thinking-2025-05-14": "dev-full-thinking-2025-05-14",
    "context-1m-2025-08-07": "context-1m-2025-08-07",
    "context-management-2025-06-27": "context-management-2025-06-27",
    "effort-2025-11-24": "effort-2025-11-24",
    "tool-search-tool-2025-10-19": "tool-search-tool-2025-10-19",
    "tool-examples-2025-10-29": "tool-examples-2025-10-29",
    "fine-grained-tool-streaming-2025-05-14": "fine-grained-tool-streaming-2025-05-14",
    # renamed: Bedrock's name for the same feature
    "advanced-tool-use-2025-11-20": "tool-search-tool-2025-10-19",
}
"""The ``anthropic-beta`` values Bedrock takes, and the name it takes each by.

Any other value is dropped (and noted): Bedrock refuses a request naming a
beta it does not know ("invalid beta flag") where Anthropic's API ignores it,
and clients such as Claude Code send betas only Anthropic's API has
(``claude-code-20250219``, ``oauth-2025-04-20``, ``prompt-caching-*`` — caching
needs no beta on Bedrock —, ``files-api-*``, ``mcp-client-*``). docs/upstream.md
lists the table."""

_CONVERSE_STOP = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
                  "stop_sequence": "stop_sequence", "guardrail_intervened": "refusal",
                  "content_filtered": "refusal",
                  "model_context_window_exceeded": "model_context_window_exceeded"}


def is_anthropic(model: str) -> bool:
    """Whether a Bedrock model id (or profile id, or ARN) names a Claude model."""
    low = model.lower()
    return "anthropic." in low or "claude" in low


def is_claude(model: str, claude: bool | None) -> bool:
    """Whether an endpoint's model is Claude: as configured (``claude``: an application
    inference profile's ARN names no model), else by its id (``is_anthropic``)."""
    return is_anthropic(model) if claude is None else claude


def model_path(model: str, operation: str) -> str:
    """``/model/{id}/{operation}`` with the id URL-encoded (``:`` and ``/`` of ARNs too)."""
    return f"/model/{quote(model, safe='')}/{operation}"


def invoke_path(model: str, stream: bool, claude: bool | None = None) -> str:
    if is_claude(model, claude):
        return model_path(model, "invoke-with-response-stream" if stream else "invoke")
    return model_path(model, "converse-stream" if stream else "converse")


def bedrock_betas(values: list[str], notes: list[str]) -> list[str]:
    """The ``anthropic_beta`` list for ``values`` (``BETAS``; the rest noted, dropped)."""
    out: list[str] = []
    for value in values:
        name = BETAS.get(value)
        if name is None:
            note(notes, "beta", f"anthropic-beta {value} dropped: Bedrock does not take it")
        elif name not in out:
            out.append(name)
    return out


def split_betas(header: str | None) -> list[str]:
    return [b.strip() for b in (header or "").split(",") if b.strip()]


def invoke_body(message: dict[str, Any], betas: list[str],
                notes: list[str]) -> dict[str, Any]:
    """An Anthropic Messages body as InvokeModel takes it (see the module docstring).

    A body that already carries ``anthropic_beta`` (a Bedrock-format client) keeps
    those values, filtered the same way, ahead of the header's."""
    out = {k: v for k, v in message.items() if k not in ("model", "stream")}
    out["anthropic_version"] = BEDROCK_ANTHROPIC_VERSION
    given = message.get("anthropic_beta")
    names = [b for b in given if isinstance(b, str)] if isinstance(given, list) else []
    kept = bedrock_betas(list(dict.fromkeys(names + betas)), notes)
    if kept:
        out["anthropic_beta"] = kept
    else:
        out.pop("anthropic_beta", None)
    return out


def count_body(invoke: dict[str, Any]) -> dict[str, Any]:
    """CountTokens' body for an InvokeModel body (the blob base64-encoded, as in JSON)."""
    import base64

    raw = json.dumps(invoke, separators=(",", ":"), ensure_ascii=False).encode()
    return {"input": {"invokeModel": {"body": base64.b64encode(raw).decode("ascii")}}}


# --- Converse ---------------------------------------------------------------------


def converse_request(message: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """An Anthropic Messages body (``encode_request``'s) → a Converse body."""
    out: dict[str, Any] = {"messages": [
        {"role": turn.get("role"), "content": _converse_blocks(turn.get("content"), notes)}
        for turn in message.get("messages") or []]}
    system = message.get("system")
    if isinstance(system, str) and system:
        out["system"] = [{"text": system}]
    elif isinstance(system, list):
        out["system"] = [{"text": b["text"]} for b in system
                         if isinstance(b, dict) and isinstance(b.get("text"), str)]
    config: dict[str, Any] = {}
    for theirs, ours in (("max_tokens", "maxTokens"), ("temperature", "temperature"),
                         ("top_p", "topP"), ("stop_sequences", "stopSequences")):
        if theirs in message:
            config[ours] = message[theirs]
    if config:
        out["inferenceConfig"] = config
    tools = message.get("tools")
    given = message.get("tool_choice")
    choice: dict[str, Any] = given if isinstance(given, dict) else {}
    if isinstance(tools, list) and tools and choice.get("type") != "none":
        tool_config: dict[str, Any] = {"tools": [
            {"toolSpec": {"name": t.get("name"), "description": t.get("description") or
                          t.get("name"), "inputSchema": {"json": t.get("input_schema")}}}
            for t in tools if isinstance(t, dict)]}
        kind = choice.get("type")
        if kind == "any":
            tool_config["toolChoice"] = {"any": {}}
        elif kind == "tool":
            tool_config["toolChoice"] = {"tool": {"name": choice.get("name")}}
        elif kind == "auto":
            tool_config["toolChoice"] = {"auto": {}}
        out["toolConfig"] = tool_config
    if "thinking" in message:
        note(notes, "reasoning", "thinking dropped: Converse takes it only per model")
    return out


def _converse_blocks(content: Any, notes: list[str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    out: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            out.append({"text": block.get("text", "")})
        elif kind == "image" and block.get("source", {}).get("type") == "base64":
            source = block["source"]
            out.append({"image": {"format": str(source.get("media_type", "")).split("/")[-1],
                                  "source": {"bytes": source.get("data")}}})
        elif kind == "tool_use":
            out.append({"toolUse": {"toolUseId": block.get("id"), "name": block.get("name"),
                                    "input": block.get("input") or {}}})
        elif kind == "tool_result":
            result = block.get("content")
            text = result if isinstance(result, str) else "".join(
                b.get("text", "") for b in result or [] if isinstance(b, dict))
            entry: dict[str, Any] = {"toolUseId": block.get("tool_use_id"),
                                     "content": [{"text": text}]}
            if block.get("is_error"):
                entry["status"] = "error"
            out.append({"toolResult": entry})
        else:
            note(notes, "content_part", f"a {kind!r} block dropped: Converse takes none")
    return out


def _anthropic_usage(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return {"input_tokens": count("inputTokens"), "output_tokens": count("outputTokens"),
            "cache_read_input_tokens": count("cacheReadInputTokens"),
            "cache_creation_input_tokens": count("cacheWriteInputTokens")}


def converse_message(data: dict[str, Any], model: str) -> dict[str, Any] | None:
    """A Converse answer → an Anthropic message (None when it is not one)."""
    output = data.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return None
    blocks: list[dict[str, Any]] = []
    for i, block in enumerate(message["content"]):
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            blocks.append({"type": "text", "text": block["text"]})
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            blocks.append({"type": "tool_use", "id": str(use.get("toolUseId") or f"tool_{i}"),
                           "name": str(use.get("name") or ""), "input": use.get("input") or {}})
        elif isinstance(block.get("reasoningContent"), dict):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            if isinstance(text, str):
                blocks.append({"type": "thinking", "thinking": text})
    stop = data.get("stopReason")
    return {"id": "msg_bedrock", "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": _CONVERSE_STOP.get(str(stop), "end_turn"),
            "stop_sequence": None, "usage": _anthropic_usage(data.get("usage"))}


class ConverseEvents:
    """ConverseStream events (event type, parsed payload) → Anthropic Messages events.

    ``feed`` returns ``(event name, data)`` pairs in Anthropic's shapes: a text
    block is opened by its first delta, a tool block by ``contentBlockStart``;
    ``messageStop``'s reason waits for ``metadata`` (the usage), which ends the
    message with ``message_delta`` and ``message_stop``."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._open: set[int] = set()
        self._stop = "end_turn"

    def feed(self, kind: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        index = data.get("contentBlockIndex")
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        if kind == "messageStart":
            return [("message_start", {"type": "message_start", "message": {
                "id": "msg_bedrock", "type": "message", "role": "assistant",
                "model": self.model, "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})]
        if kind == "contentBlockStart":
            use = (data.get("start") or {}).get("toolUse")
            if isinstance(use, dict):
                self._open.add(index)
                return [("content_block_start", {
                    "type": "content_block_start", "index": index, "content_block": {
                        "type": "tool_use", "id": str(use.get("toolUseId") or ""),
                        "name": str(use.get("name") or ""), "input": {}}})]
            return []
        if kind == "contentBlockDelta":
            return self._delta(index, data.get("delta"))
        if kind == "contentBlockStop":
            if index in self._open:
                self._open.discard(index)
                return [("content_block_stop", {"type": "content_block_stop",
                                                "index": index})]
            return []
        if kind == "messageStop":
            self._stop = _CONVERSE_STOP.get(str(data.get("stopReason")), "end_turn")
            return []
        if kind == "metadata":
            return [("message_delta", {"type": "message_delta", "delta": {
                        "stop_reason": self._stop, "stop_sequence": None},
                     "usage": _anthropic_usage(data.get("usage"))}),
                    ("message_stop", {"type": "message_stop"})]
        return []

    def _delta(self, index: int, delta: Any) -> list[tuple[str, dict[str, Any]]]:
        if not isinstance(delta, dict):
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        if isinstance(delta.get("text"), str):
            inner: dict[str, Any] = {"type": "text_delta", "text": delta["text"]}
            start: dict[str, Any] = {"type": "text", "text": ""}
        elif isinstance(delta.get("toolUse"), dict):
            inner = {"type": "input_json_delta",
                     "partial_json": str(delta["toolUse"].get("input") or "")}
            start = {}
        elif isinstance(delta.get("reasoningContent"), dict):
            text = delta["reasoningContent"].get("text")
            if not isinstance(text, str):
                return []
            inner = {"type": "thinking_delta", "thinking": text}
            start = {"type": "thinking", "thinking": ""}
        else:
            return []
        if index not in self._open and start:
            self._open.add(index)
            out.append(("content_block_start", {"type": "content_block_start",
                                                "index": index, "content_block": start}))
        out.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": inner}))
        return out
