"""The one place errors become HTTP answers, in the client protocol's shape.

``error_reply``/``json_reply`` give the parts (status, headers, body bytes) that
the client paths send on their own (``http/reply.py``); ``error_response`` and
``json_response`` wrap the same parts in Starlette responses for the admin API.
"""

from __future__ import annotations

import json
import logging
import math

from starlette.responses import Response

from humpyard.errors import HumpyardError, UpstreamError
from humpyard.http.reply import Reply
from humpyard.protocols.anthropic import error_body as anthropic_error_body
from humpyard.protocols.bedrock_client import error_body as bedrock_error_body
from humpyard.protocols.bedrock_client import error_type as bedrock_error_type
from humpyard.protocols.responses import error_body as responses_error_body
from humpyard.protocols.responses import error_type_for

log = logging.getLogger("humpyard.http")


def json_bytes(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def json_reply(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, headers or {}, json_bytes(data))


def error_reply(err: HumpyardError, *, shape: str = "openai",
                headers: dict[str, str] | None = None) -> Reply:
    """``err`` with its status, as an OpenAI (``shape="openai"``), Anthropic
    (``"anthropic"``) or Responses API (``"responses"``: OpenAI's envelope with
    ``param``, the type following the status) error body, or Bedrock's
    (``"bedrock"``: ``{"message"}``, the exception's name in ``x-amzn-ErrorType``)."""
    if err.retry_after is not None and err.retry_after > 0:
        headers = {**(headers or {}), "retry-after": str(max(1, math.ceil(err.retry_after)))}
    if err.headers:
        headers = {**(headers or {}), **err.headers}
    if shape == "anthropic":
        body = anthropic_error_body(err.status, err.message)
    elif shape == "bedrock":
        body = bedrock_error_body(err.message)
        headers = {**(headers or {}), "x-amzn-ErrorType": bedrock_error_type(err.status)}
    elif shape == "responses":
        body = responses_error_body(err.status, err.message, code=err.code)
    else:
        # an upstream's error relayed: the type its status has at OpenAI (a relayed 429
        # is a rate_limit_error, as the gateway's own are), the code saying whose it is
        kind = error_type_for(err.status) if isinstance(err, UpstreamError) else err.type
        body = {"error": {"message": err.message, "type": kind, "code": err.code}}
    return json_reply(body, err.status, headers)


def internal_reply(exc: Exception, *, shape: str = "openai",
                   headers: dict[str, str] | None = None) -> Reply:
    """An unexpected exception: logged with its trace, answered without details."""
    log.exception("unexpected error: %s", type(exc).__name__)
    return error_reply(HumpyardError("internal error; see the gateway log"),
                       shape=shape, headers=headers)


def as_response(reply: Reply) -> Response:
    return Response(reply.body, status_code=reply.status, headers=reply.headers,
                    media_type=reply.media_type)


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None,
                  ) -> Response:
    return as_response(json_reply(data, status, headers))


def error_response(err: HumpyardError, *, shape: str = "openai",
                   headers: dict[str, str] | None = None) -> Response:
    """``error_reply`` as a Starlette response."""
    return as_response(error_reply(err, shape=shape, headers=headers))


def internal_error(exc: Exception, *, shape: str = "openai",
                   headers: dict[str, str] | None = None) -> Response:
    """``internal_reply`` as a Starlette response."""
    return as_response(internal_reply(exc, shape=shape, headers=headers))
