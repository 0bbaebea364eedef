"""What every admin handler shares: the gateway, the calling key, errors as answers.

A key is required when the gateway has keys; ``manage_overrides`` for writes.
Reads are scoped to the key (docs/security.md, "Reads scoped to the key"): a
key without ``admin`` reads only its own decisions and stats (``scope``), is
refused the operator's surfaces (``require_admin``: config, metrics, quota),
and reads overrides only with ``manage_overrides``. On an open gateway (no
``[keys]``) everything stays open.
``guarded`` turns a handler's ``HumpyardError`` into its HTTP answer (and any
other exception into a logged 500).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from humpyard.config.spec import KeySpec
from humpyard.errors import ForbiddenError, HumpyardError
from humpyard.gateway import Gateway
from humpyard.http.body import lower_headers
from humpyard.http.errors import error_response, internal_error
from humpyard.keys import authenticate

Handler = Callable[[Request], Awaitable[Response]]


def gateway(request: Request) -> Gateway:
    """The app's gateway."""
    return request.app.state.gateway  # type: ignore[no-any-return]


def require_key(request: Request, *, manage: bool = False) -> KeySpec | None:
    """The calling key (None on an open gateway); 401/403 as the contract says."""
    gw = gateway(request)
    key = authenticate(gw.config.keys, lower_headers(request))
    if manage and key is not None and not key.manage_overrides:
        raise ForbiddenError(f"key {key.id!r} may not manage overrides "
                             "(needs manage_overrides = true)")
    return key


def require_admin(request: Request, what: str, *, or_manage: bool = False
                  ) -> KeySpec | None:
    """The calling key when it may read ``what`` (an operator's surface): an ``admin``
    key (or, with ``or_manage``, one with ``manage_overrides``); 403 otherwise."""
    key = require_key(request)
    if key is not None and not key.admin and not (or_manage and key.manage_overrides):
        needs = "admin = true or manage_overrides = true" if or_manage else "admin = true"
        raise ForbiddenError(f"key {key.id!r} may not read {what} (needs {needs})")
    return key


def scope(key: KeySpec | None) -> str | None:
    """The key id a read is limited to, or None when the caller reads every key's
    (an ``admin`` key, or nobody on an open gateway)."""
    return None if key is None or key.admin else key.id


def guarded(fn: Handler) -> Handler:
    """``fn`` with humpyard errors answered in OpenAI's error shape; Starlette's
    ``HTTPException`` goes on to the app's handlers (``http/app.py``: a 404 there
    names the path meant)."""
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except HumpyardError as e:
            return error_response(e)
        except HTTPException:
            raise
        except Exception as e:  # noqa: BLE001 - a 500 with the trace in the log
            return internal_error(e)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
