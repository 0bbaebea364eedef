"""The one place errors become HTTP responses, in the client protocol's shape."""

from __future__ import annotations

import json
import logging
import math

from starlette.responses import Response

from humpyard.errors import HumpyardError
from humpyard.protocols.anthropic import error_body as anthropic_error_body

log = logging.getLogger("humpyard.http")


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None,
                  ) -> Response:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_response(err: HumpyardError, *, anthropic: bool = False,
                   headers: dict[str, str] | None = None) -> Response:
    """``err`` as an OpenAI (default) or Anthropic error body with its status."""
    if err.retry_after is not None and err.retry_after > 0:
        headers = {**(headers or {}), "retry-after": str(max(1, math.ceil(err.retry_after)))}
    if anthropic:
        body = anthropic_error_body(err.status, err.message)
    else:
        body = {"error": {"message": err.message, "type": err.type, "code": err.code}}
    return json_response(body, err.status, headers)


def internal_error(exc: Exception, *, anthropic: bool = False,
                   headers: dict[str, str] | None = None) -> Response:
    """An unexpected exception: logged with its trace, answered without details."""
    log.exception("unexpected error: %s", type(exc).__name__)
    return error_response(HumpyardError("internal error; see the gateway log"),
                          anthropic=anthropic, headers=headers)
