"""Amazon Bedrock's InvokeModel as a client protocol: what differs from Anthropic Messages.

A client configured for Bedrock (Claude Code with ``CLAUDE_CODE_USE_BEDROCK``,
the ``anthropic`` SDK's ``AnthropicBedrock``, boto3's ``bedrock-runtime``) posts
an Anthropic Messages body to ``/model/{modelId}/invoke`` or
``/model/{modelId}/invoke-with-response-stream``, with three differences:

- the model is the path's ``{modelId}``, and whether to stream is the path's
  last segment; the body has neither ``model`` nor ``stream`` (Bedrock refuses
  them, and so does this gateway: a client that works against Bedrock never
  sends them);
- ``anthropic_version`` (``"bedrock-2023-05-31"``) is a body field, not a header;
- the betas are the body's ``anthropic_beta`` list, not (only) a header.

``to_messages`` turns such a request into the Anthropic Messages request it
stands for — the path's model as ``model``, the betas as the ``anthropic-beta``
header (the header's own values first) — so from there it is served exactly
as ``/v1/messages`` would serve it. The answer is Anthropic's Messages JSON;
a stream is event-stream messages (``protocols/eventstream.py``), one
``chunk`` event per Anthropic event with the event's JSON base64-encoded in
``{"bytes": …}``, as Bedrock sends them. Errors are Bedrock's: a JSON body
``{"message": …}`` with the exception's name in ``x-amzn-ErrorType``
(``error_type``), or, after a stream's first content, an exception message
(``stream_exception``). docs/clients.md, "Claude Code through the Bedrock
format".
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from humpyard.errors import RequestError
from humpyard.protocols.eventstream import event_message, exception_message

BEDROCK_VERSION = "bedrock-2023-05-31"
MAX_BETAS = 64
MAX_BETA_CHARS = 128


def to_messages(body: Any, model_id: str, stream: bool,
                headers: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The Anthropic Messages body and the headers that go with it (``headers`` with
    the betas merged into ``anthropic-beta``); ``RequestError`` naming the field for
    a request Bedrock would refuse."""
    if not model_id:  # its length and characters are checked as any model's
        raise RequestError("modelId: missing from the path /model/{modelId}/invoke")
    if not isinstance(body, dict):
        raise RequestError("request body: expected a JSON object (an Anthropic Messages "
                           "body without model and stream)")
    for name in ("model", "stream"):
        if name in body:
            raise RequestError(f"{name}: not a field of a Bedrock InvokeModel body (the model "
                               "is the path's {modelId}, streaming its "
                               "invoke-with-response-stream)")
    version = body.get("anthropic_version")
    if version is not None and not isinstance(version, str):
        raise RequestError("anthropic_version: must be a string such as "
                           f"{BEDROCK_VERSION!r}")
    betas = _betas(body.get("anthropic_beta"))
    out = {k: v for k, v in body.items() if k not in ("anthropic_version", "anthropic_beta")}
    out["model"] = model_id
    if stream:
        out["stream"] = True
    merged = dict(headers)
    header_betas = [b.strip() for b in merged.get("anthropic-beta", "").split(",") if b.strip()]
    names = list(dict.fromkeys(header_betas + betas))
    if names:
        merged["anthropic-beta"] = ",".join(names)
    return out, merged


def _betas(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_BETAS:
        raise RequestError(f"anthropic_beta: a list of at most {MAX_BETAS} beta names")
    for i, name in enumerate(value):
        if not (isinstance(name, str) and 0 < len(name) <= MAX_BETA_CHARS and name.isascii()
                and name.isprintable() and "," not in name):
            raise RequestError(f"anthropic_beta[{i}]: a beta name, 1 to {MAX_BETA_CHARS} "
                               "printable ASCII characters without commas")
    return [name.strip() for name in value if name.strip()]


# -- answers ---------------------------------------------------------------------------

_ERROR_TYPES = {400: "ValidationException", 401: "AccessDeniedException",
                403: "AccessDeniedException", 404: "ResourceNotFoundException",
                408: "ModelTimeoutException", 413: "ValidationException",
                422: "ValidationException", 424: "ModelErrorException",
                429: "ThrottlingException", 431: "ValidationException",
                503: "ServiceUnavailableException"}


def error_type(status: int) -> str:
    """The Bedrock exception named in ``x-amzn-ErrorType`` for an error status (what
    boto3 raises: ``client.exceptions.ThrottlingException`` for 429, …)."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "ValidationException" if status < 500 else "InternalServerException"


def error_body(message: str) -> dict[str, str]:
    """Bedrock's error body."""
    return {"message": message}


STREAM_ERROR = "modelStreamErrorException"
"""The exception that ends a stream broken after its first content (Bedrock's name for
an error while the model's answer streams)."""


def chunk(event: bytes) -> bytes:
    """One Anthropic event's JSON as a Bedrock ``chunk`` event message."""
    payload = b'{"bytes":"' + base64.b64encode(event) + b'"}'
    return event_message("chunk", payload)


def stream_exception(message: str, status: int = 502) -> bytes:
    """The exception message that ends a stream broken after its first content."""
    payload = json.dumps({"message": message, "originalStatusCode": status},
                         separators=(",", ":")).encode()
    return exception_message(STREAM_ERROR, payload)


PING = chunk(b'{"type":"ping"}')
"""What a silent stream is kept alive with: Anthropic's ``ping`` event, as a chunk
(every Anthropic client skips it; an SSE comment would corrupt the event stream)."""
