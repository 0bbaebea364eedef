"""Prompt-size estimates and request traits, from an OpenAI chat-completions body.

Two numbers come out of one walk over the body:

- **high**, the conservative estimate: about one token per 3 bytes of message
  text and tool definitions, plus a small overhead per message. Selector
  ``prompt_tokens`` rules match against it and ``POST /v1/messages/count_tokens``
  returns it. It errs high on purpose.
- **low**, the optimistic estimate: about one token per 6 bytes, no overhead.
  Only certain-overflow capability removal uses it, so that a removal means
  "even an optimistic tokenizer cannot fit this".

An image (an ``image_url``/``image`` content part) counts as a fixed
``IMAGE_TOKENS_HIGH`` (1,600) tokens in the high estimate and
``IMAGE_TOKENS_LOW`` (85) in the low one, never the bytes of a base64 data
URL. Audio and file parts count the same fixed amounts. The functions never
raise on an odd body: parts they do not understand are sized as JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

BYTES_PER_TOKEN_HIGH = 3
BYTES_PER_TOKEN_LOW = 6
MESSAGE_OVERHEAD_TOKENS = 4
"""Role, separators and name framing per message (high estimate only)."""
REPLY_PRIMING_TOKENS = 3
IMAGE_TOKENS_HIGH = 1600
"""A large image at high detail on common vision models is at most about this."""
IMAGE_TOKENS_LOW = 85
"""The smallest image cost of common vision models (OpenAI's low-detail tile)."""

_IMAGE_PARTS = frozenset({"image_url", "image"})
_ATTACHMENT_PARTS = frozenset({"input_audio", "file", "audio"})
_SCHEMA_KEYS = ("tools", "functions", "response_format")


@dataclass(frozen=True, slots=True)
class PromptShape:
    """What one walk over a body learns: both estimates and the two traits."""

    high: int
    low: int
    tools: bool
    images: bool


def _text_bytes(s: str) -> int:
    if s.isascii():  # O(1) in CPython: the common case costs no encoding
        return len(s)
    return len(s.encode("utf-8", "surrogatepass"))


def _json_bytes(value: Any) -> int:
    """About the size of ``json.dumps(value)``, without building the string."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += _text_bytes(v) + 2
        elif isinstance(v, dict):
            total += 2
            for k, item in v.items():
                total += (_text_bytes(k) if isinstance(k, str) else 4) + 4
                stack.append(item)
        elif isinstance(v, list | tuple):
            total += 2 + len(v)
            stack.extend(v)
        else:
            total += 5  # numbers, booleans, null
    return total


def _content(content: Any) -> tuple[int, int, int]:
    """(text bytes, image count, attachment count) of a message's content."""
    if isinstance(content, str):
        return _text_bytes(content), 0, 0
    if not isinstance(content, list):
        return (0, 0, 0) if content is None else (_json_bytes(content), 0, 0)
    size = images = attachments = 0
    for part in content:
        if not isinstance(part, dict):
            size += _json_bytes(part)
            continue
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            size += _text_bytes(text) if isinstance(text, str) else _json_bytes(text)
        elif kind in _IMAGE_PARTS:
            images += 1
        elif kind in _ATTACHMENT_PARTS:
            attachments += 1
        else:
            size += _json_bytes(part)
    return size, images, attachments


def _message(message: Any) -> tuple[int, int, int]:
    if not isinstance(message, dict):
        return _json_bytes(message), 0, 0
    size, images, attachments = _content(message.get("content"))
    for key, value in message.items():
        if key in ("content", "role"):
            continue
        if isinstance(value, str):
            size += _text_bytes(value)
        elif value is not None:
            size += _json_bytes(value)  # tool_calls, function_call, ...
    return size, images, attachments


def analyse_request(body: dict) -> PromptShape:
    """Both estimates and both traits of a chat-completions body, in one walk."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    size = images = attachments = 0
    for m in messages:
        s, i, a = _message(m)
        size += s
        images += i
        attachments += a
    for key in _SCHEMA_KEYS:
        value = body.get(key)
        if value:
            size += _json_bytes(value)
    fixed = images + attachments
    high = (-(-size // BYTES_PER_TOKEN_HIGH) + MESSAGE_OVERHEAD_TOKENS * len(messages)
            + REPLY_PRIMING_TOKENS + fixed * IMAGE_TOKENS_HIGH)
    low = size // BYTES_PER_TOKEN_LOW + fixed * IMAGE_TOKENS_LOW
    tools = bool(body.get("tools")) or bool(body.get("functions"))
    return PromptShape(high=high, low=low, tools=tools, images=images > 0)


def estimate_prompt_tokens(body: dict) -> tuple[int, int]:
    """(high, low) prompt-token estimates; ``high >= low`` always holds."""
    shape = analyse_request(body)
    return shape.high, shape.low


def request_traits(body: dict) -> tuple[bool, bool]:
    """(tools, images): whether the body defines tools and whether it carries images.

    Cheaper than ``analyse_request``: it sizes nothing, and stops at the first image.
    """
    tools = bool(body.get("tools")) or bool(body.get("functions"))
    messages = body.get("messages")
    if isinstance(messages, list):
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list) and any(
                    isinstance(p, dict) and p.get("type") in _IMAGE_PARTS for p in content):
                return tools, True
    return tools, False


_ANSWER_TEXT = re.compile(
    r'"(?:content|reasoning_content|reasoning|refusal|arguments|text|partial_json|thinking)"'
    r'\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"')  # unrolled: linear even unterminated
"""A string field of a stream event that carries answer text: a chat chunk's
``content``, reasoning and tool-call ``arguments``; an Anthropic event's
``text``, ``partial_json`` and ``thinking`` deltas."""


def relayed_text_bytes(data: str) -> int:
    """About how many bytes of answer text one stream event (its JSON ``data``)
    carries, counted as escaped in the JSON (a little high for escapes: the
    estimate it feeds errs high on purpose). Never parses: one regular
    expression scan, cheap enough for every relayed event."""
    if '":' not in data:
        return 0
    n = 0
    for m in _ANSWER_TEXT.finditer(data):
        text = m.group(1)
        n += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return n


_ANSWER_TEXT_BYTES = re.compile(_ANSWER_TEXT.pattern.encode())


def relayed_text_bytes_raw(data: bytes) -> int:
    """``relayed_text_bytes`` of events as they came (their UTF-8 bytes, any number
    of them): the same count for valid UTF-8, without decoding it."""
    if b'":' not in data:
        return 0
    n = 0
    for m in _ANSWER_TEXT_BYTES.finditer(data):
        n += m.end(1) - m.start(1)
    return n


def output_tokens_for(text_bytes: int) -> int:
    """The conservative (high) token estimate for ``text_bytes`` of answer text,
    at least 1 when there is any."""
    return -(-max(0, text_bytes) // BYTES_PER_TOKEN_HIGH)
