"""OpenAI chat completions → Responses API ``response`` objects (pure).

``encode_response`` turns a buffered chat completion into the ``response``
a Responses client expects; ``ResponsesStreamTranslator`` (in
``responses_stream``) does the same event by event and builds its final
``response`` with the helpers here. ``error_body`` is the Responses error
shape (the same envelope as chat's). Request decoding is in
``responses_request``.
"""

from __future__ import annotations

from typing import Any

from humpyard.protocols.anthropic import parse_arguments
from humpyard.protocols.responses_request import ResponsesContext

__all__ = ["encode_response", "encode_usage", "error_body", "function_call_item",
           "message_item", "response_object"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}
# Echoed from the request into every response, with the value used when absent.
_ECHOED = {"instructions": None, "metadata": None, "max_output_tokens": None,
           "temperature": None, "top_p": None, "user": None, "safety_identifier": None,
           "prompt_cache_key": None, "parallel_tool_calls": True, "tool_choice": "auto",
           "truncation": "disabled"}


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def encode_usage(usage: Any) -> dict:
    """OpenAI chat ``usage`` → Responses usage, with cached and reasoning token details.

    Cache reads come from ``prompt_tokens_details.cached_tokens``, cache
    writes from ``cache_creation_input_tokens`` (what the Anthropic upstream
    decoder sets) or ``prompt_tokens_details.cache_write_tokens``; both stay
    counted in ``input_tokens``, as OpenAI counts them.
    """
    usage = usage if isinstance(usage, dict) else {}
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = _count(details.get("cached_tokens"))
    written = _count(usage.get("cache_creation_input_tokens")) or \
        _count(details.get("cache_write_tokens"))
    out_details = usage.get("completion_tokens_details")
    reasoning = _count(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) \
        else 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": _count(usage.get("total_tokens")) or prompt + completion}


def response_object(ctx: ResponsesContext, *, response_id: str, created_at: int,
                    status: str, output: list[dict], usage: dict | None = None,
                    incomplete_reason: str | None = None,
                    error: dict | None = None) -> dict:
    """A ``response`` object: the request's options echoed, and ``output``/``status``."""
    request = ctx.request
    reasoning = _dict(request.get("reasoning"))
    text = _dict(request.get("text"))
    body: dict[str, Any] = {
        "id": response_id, "object": "response", "created_at": created_at,
        "status": status, "model": ctx.model, "output": output,
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "tools": request.get("tools") if isinstance(request.get("tools"), list) else [],
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "text": {"format": text.get("format") or {"type": "text"}},
        "store": False, "background": False, "previous_response_id": None,
        "usage": usage,
    }
    for key, default in _ECHOED.items():
        value = request.get(key)
        body[key] = default if value is None else value
    return body


def message_item(item_id: str, text: str, *, refusal: bool = False,
                 status: str = "completed") -> dict:
    """An assistant ``message`` output item holding ``text`` (or a refusal)."""
    part = {"type": "refusal", "refusal": text} if refusal else \
        {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "role": "assistant", "status": status,
            "content": [part]}


def function_call_item(ctx: ResponsesContext, item_id: str, call_id: str, chat_name: str,
                       arguments: str, *, status: str = "completed") -> dict:
    """A ``function_call`` (or ``custom_tool_call``) item for a chat tool call.

    The chat name is mapped back through the request's tools: a namespace
    member gets its ``namespace``; a custom tool's ``{"input": ...}``
    arguments become the call's ``input``.
    """
    tool = ctx.names.lookup(chat_name)
    if tool.custom:
        value = parse_arguments(arguments).get("input")
        return {"type": "custom_tool_call", "id": item_id, "call_id": call_id,
                "name": tool.name, "input": value if isinstance(value, str) else arguments,
                "status": status}
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": tool.name,
            "arguments": arguments, "status": status}
    if tool.namespace:
        item["namespace"] = tool.namespace
    return item


def reasoning_item(item_id: str, text: str) -> dict:
    """A ``reasoning`` output item carrying an upstream's reasoning text."""
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def status_for(finish_reason: Any) -> tuple[str, str | None]:
    """``(status, incomplete_reason)`` for a chat ``finish_reason``."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def encode_response(completion: dict, ctx: ResponsesContext, *, response_id: str,
                    created_at: int) -> dict:
    """A buffered chat completion → a Responses ``response`` (status ``completed``).

    Only ``choices[0]`` is read: its reasoning (``reasoning_content`` or
    ``reasoning``) becomes a reasoning item, its text (or refusal) a message
    item, each tool call a function-call item. ``finish_reason`` ``length``
    makes the response ``incomplete`` (``max_output_tokens``). Never raises on
    odd upstream output. Item ids derive from ``response_id``.
    """
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    assert isinstance(message, dict)
    suffix = response_id.removeprefix("resp_")
    output: list[dict] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append(reasoning_item(f"rs_{suffix}", reasoning))
    text = _text(message.get("content"))
    refusal = message.get("refusal")
    if text:
        output.append(message_item(f"msg_{suffix}", text))
    elif isinstance(refusal, str) and refusal:
        output.append(message_item(f"msg_{suffix}", refusal, refusal=True))
    calls = message.get("tool_calls")
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        call = call if isinstance(call, dict) else {}
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        assert isinstance(function, dict)
        name = function.get("name") if isinstance(function.get("name"), str) else ""
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = "{}"
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") \
            else f"call_{suffix}_{i}"
        output.append(function_call_item(ctx, f"fc_{suffix}_{i}", str(call_id), str(name),
                                         arguments))
    status, reason = status_for(choice.get("finish_reason"))
    return response_object(ctx, response_id=response_id, created_at=created_at, status=status,
                           output=output, usage=encode_usage(completion.get("usage")),
                           incomplete_reason=reason)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict)
                       and p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""


def error_type_for(status: int) -> str:
    """The error ``type`` OpenAI uses for an HTTP status (``api_error`` for 5xx)."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_body(status: int, message: str, *, code: str | None = None,
               param: str | None = None) -> dict:
    """The Responses API error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type_for(status), "param": param,
                      "code": code}}
