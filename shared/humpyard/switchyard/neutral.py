"""OpenAI chat bodies ↔ Switchyard's provider-neutral request and response.

Switchyard's algorithms read a neutral ``LlmRequest`` (crate
``switchyard-protocol``): system and developer messages become
``instructions``, every other message a list of typed content blocks, a tool
result a ``tool_result`` block inside a user message (which is where the
stage router's tool signals look), an assistant's tool calls ``tool_call``
blocks with parsed arguments. This module follows Switchyard's own OpenAI
chat codec for those shapes, so the signals match what its server sees.

Pure functions over plain dicts; ``switchyard`` is not imported. The neutral
dicts are what ``Algorithm.run_stream`` and ``LlmResponse.Agg`` accept.
Conversion never raises on a body that ``protocols.openai.validate_chat``
accepted: shapes it cannot read are dropped or passed as ``unknown`` blocks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

FORMAT = "openai_chat"
"""The wire-format name Switchyard gives OpenAI chat, used on ``unknown`` blocks."""

_STOP_IN = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
            "function_call": "tool_use", "content_filter": "content_filter"}
_STOP_OUT = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls",
             "content_filter": "content_filter", "error": "stop", "unknown": "stop"}


# ---------------------------------------------------------------- requests


def request_to_neutral(body: Mapping[str, Any]) -> dict[str, Any]:
    """The neutral request for an OpenAI chat body (which is not modified)."""
    instructions: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    generated = 0
    for m in body.get("messages") or ():
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            instructions.append({"role": role, "content": content_blocks(m.get("content"))})
        elif role in ("tool", "function"):
            call_id = m.get("tool_call_id") if role == "tool" else m.get("name")
            messages.append({"role": "user", "content": [{
                "type": "tool_result", "tool_call_id": str(call_id or ""),
                "content": [{"type": "text", "text": text_of(m.get("content"))}],
                "is_error": None}]})
        elif role == "assistant":
            blocks = content_blocks(m.get("content"))
            calls = list(m.get("tool_calls") or ())
            if isinstance(m.get("function_call"), Mapping):
                calls.append({"function": m["function_call"]})
            decoded = []
            for call in calls:
                generated += 1
                if isinstance(call, Mapping):
                    decoded.append(_tool_call(call, generated))
            if decoded and all(b == {"type": "text", "text": ""} for b in blocks):
                blocks = []
            messages.append({"role": "assistant", "content": blocks + decoded})
        else:
            messages.append({"role": "user", "content": content_blocks(m.get("content"))})
    out: dict[str, Any] = {
        "instructions": instructions,
        "messages": messages,
        "tools": _tools(body.get("tools")),
        "tool_choice": _tool_choice(body["tool_choice"]) if "tool_choice" in body else None,
        "sampling": {"temperature": _number(body.get("temperature")),
                     "top_p": _number(body.get("top_p")), "top_k": None},
        "output": {"max_output_tokens": _max_tokens(body),
                   "response_format": body.get("response_format")},
        "reasoning": {"effort": _str_or_none(body.get("reasoning_effort")), "raw": None},
        "stream": body.get("stream") is True,
    }
    if isinstance(body.get("model"), str) and body["model"]:
        out["model"] = body["model"]
    return out


def content_blocks(content: Any) -> list[dict[str, Any]]:
    """Neutral content blocks for an OpenAI message ``content`` (string, parts or null)."""
    if content is None:
        return [{"type": "text", "text": ""}]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return [{"type": "text", "text": json.dumps(content)}]
    blocks = [b for b in (_part(p) for p in content if isinstance(p, Mapping)) if b]
    return blocks or [{"type": "text", "text": ""}]


def text_of(content: Any) -> str:
    """The text of an OpenAI ``content`` value: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, Mapping) and p.get("type") in ("text", "input_text"))
    return "" if content is None else json.dumps(content)


def _part(p: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = p.get("type")
    if kind in ("text", "input_text", "output_text"):
        return {"type": "text", "text": str(p.get("text") or "")}
    if kind == "refusal":
        return {"type": "refusal", "text": str(p.get("refusal") or "")}
    if kind in ("image_url", "input_image"):
        image = p.get("image_url")
        url = _obj(image).get("url", image)
        if not isinstance(url, str):
            return None
        detail = _obj(image).get("detail", p.get("detail"))
        return {"type": "image", "source": {"type": "url", "data": {
            "url": url, "detail": _str_or_none(detail)}}}
    if kind == "input_audio" and isinstance(p.get("input_audio"), Mapping):
        audio = _obj(p["input_audio"])
        fmt = _str_or_none(audio.get("format"))
        return {"type": "audio", "source": {"type": "base64", "data": {
            "media_type": f"audio/{fmt}" if fmt else None, "data": str(audio.get("data") or "")}}}
    if kind in ("file", "input_file"):
        f = _obj(p.get("file")) or p
        if isinstance(f.get("file_id"), str):
            return {"type": "file", "source": {"type": "file_id", "data": f["file_id"]}}
        if isinstance(f.get("file_data"), str):
            return {"type": "file", "source": {"type": "file_data", "data": {
                "data": f["file_data"], "filename": _str_or_none(f.get("filename"))}}}
    return {"type": "unknown", "provider": FORMAT, "raw": dict(p)}


def _tool_call(call: Mapping[str, Any], n: int) -> dict[str, Any]:
    fn = _obj(call.get("function"))
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            parsed: Any = json.loads(args) if args.strip() else {}
        except ValueError:
            parsed = {"raw": args}
    else:
        parsed = args if args is not None else {}
    return {"type": "tool_call", "id": str(call.get("id") or f"call_{n}"),
            "name": str(fn.get("name") or ""), "arguments": parsed}


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, Mapping):
            continue
        fn = _obj(t.get("function")) or t
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            continue
        strict = fn.get("strict")
        out.append({"name": name, "description": _str_or_none(fn.get("description")),
                    "parameters": fn.get("parameters", {}),
                    "strict": strict if isinstance(strict, bool) else None})
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    if choice in ("auto", "required", "none"):
        return {"type": choice}
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        if isinstance(name, str):
            return {"type": "tool", "data": {"name": name}}
    return {"type": "raw", "data": choice}


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def neutral_to_request(req: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat body (no ``model``, not streamed) for a request Switchyard built.

    Used for judge calls: their prompt, transcript and ``response_format`` are
    Switchyard's. ``max_output_tokens`` becomes ``max_tokens``, as the rest of
    the gateway sends it.
    """
    messages: list[dict[str, Any]] = [
        {"role": "developer" if i.get("role") == "developer" else "system",
         "content": _joined_text(i.get("content"), "\n\n")}
        for i in req.get("instructions") or ()]
    for m in req.get("messages") or ():
        messages.extend(_openai_messages(m))
    body: dict[str, Any] = {"messages": messages, "stream": False}
    tools = req.get("tools") or []
    if tools:
        body["tools"] = [{"type": "function", "function": {
            k: v for k, v in t.items() if v is not None}} for t in tools]
        choice = req.get("tool_choice")
        if isinstance(choice, Mapping):
            kind = choice.get("type")
            if kind in ("auto", "required", "none"):
                body["tool_choice"] = kind
            elif kind == "tool":
                body["tool_choice"] = {"type": "function", "function": choice["data"]}
            elif kind == "raw":
                body["tool_choice"] = choice.get("data")
    sampling, output = req.get("sampling") or {}, req.get("output") or {}
    for key, value in (("temperature", sampling.get("temperature")),
                       ("top_p", sampling.get("top_p")),
                       ("max_tokens", output.get("max_output_tokens")),
                       ("response_format", output.get("response_format")),
                       ("reasoning_effort", (req.get("reasoning") or {}).get("effort"))):
        if value is not None:
            body[key] = value
    return body


def _openai_messages(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    rest: list[Mapping[str, Any]] = []
    for b in m.get("content") or ():
        if b.get("type") == "tool_result":
            out.append({"role": "tool", "tool_call_id": b.get("tool_call_id", ""),
                        "content": _joined_text(b.get("content"), " ")})
        else:
            rest.append(b)
    role = "assistant" if m.get("role") == "assistant" else "user"
    if rest or not out:
        calls = [{"id": b.get("id", ""), "type": "function", "function": {
            "name": b.get("name", ""), "arguments": json.dumps(b.get("arguments", {}))}}
            for b in rest if b.get("type") == "tool_call"]
        msg: dict[str, Any] = {"role": role, "content": _joined_text(
            [b for b in rest if b.get("type") != "tool_call"], "")}
        if calls:
            msg["tool_calls"] = calls
            msg["content"] = msg["content"] or None
        out.append(msg)
    return out


def _joined_text(blocks: Any, sep: str) -> str:
    return sep.join(str(b.get("text", "")) for b in blocks or ()
                    if isinstance(b, Mapping) and b.get("type") in ("text", "refusal"))


# --------------------------------------------------------------- responses


def completion_to_neutral(completion: Mapping[str, Any], *, response_id: str) -> dict[str, Any]:
    """The neutral aggregate response for an OpenAI chat completion.

    ``response_id`` replaces the upstream id so the adapter can recognise its
    own answer when Switchyard hands it back as ``outcome.response``.
    """
    outputs = []
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if isinstance(choice, Mapping):
        msg = _obj(choice.get("message"))
        blocks = content_blocks(msg.get("content")) if msg.get("content") is not None else []
        if isinstance(msg.get("refusal"), str) and msg["refusal"]:
            blocks.append({"type": "refusal", "text": msg["refusal"]})
        calls = [_tool_call(c, i + 1) for i, c in enumerate(msg.get("tool_calls") or ())
                 if isinstance(c, Mapping)]
        finish = choice.get("finish_reason")
        outputs.append({"role": "assistant", "content": blocks + calls,
                        "stop_reason": _STOP_IN.get(finish, "unknown") if finish else None})
    usage = _obj(completion.get("usage"))
    return {
        "id": response_id,
        "model": _str_or_none(completion.get("model")),
        "outputs": outputs,
        "usage": {"input_tokens": _count(usage.get("prompt_tokens")),
                  "output_tokens": _count(usage.get("completion_tokens")),
                  "total_tokens": _count(usage.get("total_tokens")),
                  "reasoning_tokens": None},
    }


def neutral_to_completion(agg: Mapping[str, Any], *, model: str) -> dict[str, Any]:
    """An OpenAI chat completion for a neutral aggregate response."""
    outputs = agg.get("outputs") or []
    first = outputs[0] if outputs else {}
    blocks = first.get("content") or []
    calls = [{"id": b.get("id", ""), "type": "function", "function": {
        "name": b.get("name", ""), "arguments": json.dumps(b.get("arguments", {}))}}
        for b in blocks if b.get("type") == "tool_call"]
    text = _joined_text(blocks, "")
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    usage = agg.get("usage") or {}
    prompt, completion = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
    return {
        "id": agg.get("id") or "chatcmpl-humpyard",
        "object": "chat.completion",
        "created": 0,
        "model": agg.get("model") or model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": _STOP_OUT.get(first.get("stop_reason") or "", "stop")}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": usage.get("total_tokens") or prompt + completion},
    }


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
