"""``/v1/overrides``: runtime switches that only ever remove targets.

Creating needs a ledger (409 without one: nothing would survive a restart)
and, when keys exist, a key with ``manage_overrides``; reading them (and
their audit) a key with ``manage_overrides`` or ``admin``. Subjects must exist in
the loaded configuration. Every create, removal and expiry is audited with
the key id. Every store call runs on the gateway's read pool (``gw.reads``),
never on the event loop; a change is read back into the gateway's state in
the same call, so the next request is planned with it.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from humpyard.config.spec import Config
from humpyard.errors import ConflictError, HumpyardError, StoreError
from humpyard.http.body import read_json
from humpyard.http.errors import json_response
from humpyard.http.guard import gateway, guarded, require_admin, require_key
from humpyard.overrides import is_stale, validate
from humpyard.planning.types import Override

log = logging.getLogger("humpyard.http")


def view(ov: Override, config: Config, now: float) -> dict[str, Any]:
    d = ov.to_dict()
    d["stale"] = is_stale(ov, config)
    d["expires_in_secs"] = max(0.0, round(ov.expires_at - now, 3))
    return d


@guarded
async def list_overrides(request: Request) -> Response:
    require_admin(request, "overrides", or_manage=True)
    gw = gateway(request)
    now = gw.clock.now()
    items = await gw.reads.run(_listed, gw, now)
    return json_response({"overrides": [view(o, gw.config, now) for o in items]})


@guarded
async def create_override(request: Request) -> Response:
    key = require_key(request, manage=True)
    gw = gateway(request)
    if not gw.store.has_ledger:
        raise ConflictError("overrides need a [ledger]: without one nothing would "
                            "survive a restart")
    config = gw.config
    kind, subject, target, reason, secs = validate(
        await read_json(request, 64 * 1024), config)
    limits = config.overrides
    secs = min(secs if secs is not None else limits.default_secs, limits.max_secs)
    now = gw.clock.now()
    by = key.id if key else None
    ov = await gw.reads.run(_create, gw, Override(
        id="", kind=kind, subject=subject, target=target, reason=reason,
        created_at=now, expires_at=now + secs, created_by=by), by, now)
    return json_response(view(ov, config, now), 201)


@guarded
async def delete_override(request: Request) -> Response:
    key = require_key(request, manage=True)
    gw = gateway(request)
    if not gw.store.has_ledger:
        raise ConflictError("overrides need a [ledger]")
    now = gw.clock.now()
    by = key.id if key else None
    ov = await gw.reads.run(_delete, gw, request.path_params["id"], by, now)
    if ov is None:
        raise HumpyardError("no such override", status=404, code="not_found")
    return json_response(view(ov, gw.config, now))


@guarded
async def override_audit(request: Request) -> Response:
    require_admin(request, "the override audit", or_manage=True)
    gw = gateway(request)
    if not gw.store.has_ledger:
        return json_response({"audit": []})
    return json_response({"audit": await gw.reads.run(gw.store.list_audit, limit=200)})


# -- the store calls, each run on the read pool ---------------------------------------

def _listed(gw: Any, now: float) -> list[Override]:
    _expire(gw, now)
    return gw.store.list_overrides(now) if gw.store.has_ledger else []


def _changed(gw: Any) -> None:
    """After a change: wake the expiry sweep and read the overrides back at once."""
    gw.invalidate()
    gw.reload_state()


def _create(gw: Any, ov: Override, by: str | None, now: float) -> Override:
    stored: Override = gw.store.create_override(ov)
    gw.store.audit("create", stored, by, now)
    _changed(gw)
    return stored


def _delete(gw: Any, oid: str, by: str | None, now: float) -> Override | None:
    found: Override | None = gw.store.delete_override(oid, by=by, now=now)
    if found is not None:
        _changed(gw)
    return found


def _expire(gw: Any, now: float) -> None:
    """Audit overrides that ran out. Listing never needs it (expired ones are not
    listed), so a store that cannot write does not stop the listing."""
    if gw.store.has_ledger:
        try:
            gw.store.expire_due(now)
        except StoreError as e:
            log.error("could not record expired overrides: %s", e.message)
