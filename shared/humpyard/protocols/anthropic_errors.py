"""Anthropic error answers, restated for the failure classifier (pure).

``upstream.classify.classify_status`` reads a status and the head of an
OpenAI-style error body. Anthropic's bodies (``{"type": "error", "error":
{"type", "message"}}``) say the same things in other words, so
``anthropic_error_facts`` restates them before classification:

- ``not_found_error`` naming the model (``model: claude-x``) → code
  ``model_not_found``: the classifier's *model gone* (unavailable);
- ``prompt is too long`` / ``exceed context limit`` → code
  ``context_length_exceeded``: overflow;
- 529 ``overloaded_error`` keeps its status, which the classifier counts as a
  server error; 429 (its ``retry-after`` header is the executor's), 401, 403
  and the rest keep theirs.
"""

from __future__ import annotations

import json
import re

BODY_HEAD_BYTES = 4096
"""How much of a body is read: the same as ``upstream.classify.BODY_HEAD_BYTES``."""

_CONTEXT = re.compile(r"prompt is too long|exceeds? (the )?context|context limit|"
                      r"context window", re.IGNORECASE)
_MODEL = re.compile(r"^model:|\bmodel\b.*\b(not found|does not exist|deprecated)",
                    re.IGNORECASE)


def anthropic_error_facts(status: int, body: bytes) -> tuple[int, bytes]:
    """``(status, body_for_classification)`` for an Anthropic error answer.

    The body returned is OpenAI's error shape, ``{"error": {"message", "type",
    "code"}}``, with ``code`` set when the Anthropic error means a gone model
    or an overflowing prompt; pass both to ``classify_status``. A body that is
    not Anthropic's JSON is returned unchanged. Reads at most
    ``BODY_HEAD_BYTES`` of ``body``.
    """
    head = body[:BODY_HEAD_BYTES]
    try:
        doc = json.loads(head)
    except (ValueError, RecursionError):
        return status, head
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return status, head
    kind = str(error.get("type") or "api_error")
    message = str(error.get("message") or "")
    code: str | None = None
    if status in (400, 404) and kind == "not_found_error" and _MODEL.search(message):
        code = "model_not_found"
    elif status in (400, 413) and _CONTEXT.search(message):
        code = "context_length_exceeded"
    elif kind == "overloaded_error":
        code = "overloaded"
    restated = {"error": {"message": message, "type": kind, "code": code}}
    return status, json.dumps(restated).encode()
