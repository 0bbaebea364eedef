"""Admin-surface access: a key when keys exist, ``manage_overrides`` for writes."""

from __future__ import annotations

from starlette.requests import Request

from humpyard.config.spec import KeySpec
from humpyard.errors import ForbiddenError
from humpyard.gateway import Gateway
from humpyard.http.body import lower_headers
from humpyard.keys import authenticate


def gateway(request: Request) -> Gateway:
    return request.app.state.gateway  # type: ignore[no-any-return]


def require_key(request: Request, *, manage: bool = False) -> KeySpec | None:
    """The calling key (None on an open gateway); 401/403 as the contract says."""
    gw = gateway(request)
    key = authenticate(gw.config.keys, lower_headers(request))
    if manage and key is not None and not key.manage_overrides:
        raise ForbiddenError(f"key {key.id!r} may not manage overrides "
                             "(needs manage_overrides = true)")
    return key
