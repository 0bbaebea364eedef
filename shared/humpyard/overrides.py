"""Runtime overrides: validating a new one and telling whether a stored one is stale.

An override only removes (a target, a provider's endpoints, or all but the
pinned targets of a route); the planner applies them. One that names what a
reload removed is ``stale``: kept, listed, and without effect.
"""

from __future__ import annotations

from typing import Any

from humpyard.config.spec import Config
from humpyard.errors import RequestError
from humpyard.planning.types import Override

KINDS = ("disable_target", "drain_provider", "pin_route")


def is_stale(ov: Override, config: Config) -> bool:
    """Whether the override names something the loaded configuration lacks."""
    if ov.kind == "disable_target":
        return ov.subject not in config.targets
    if ov.kind == "drain_provider":
        return ov.subject not in config.providers
    route = config.routes.get(ov.subject)
    return route is None or ov.target not in route.all_targets


def validate(body: Any, config: Config) -> tuple[str, str, str | None, str, float | None]:
    """(kind, subject, target, reason, expires_in_secs) or ``RequestError`` naming the field."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    unknown = set(body) - {"kind", "subject", "target", "reason", "expires_in_secs"}
    if unknown:
        raise RequestError(f"unknown fields: {sorted(unknown)}")
    kind, subject, target = body.get("kind"), body.get("subject"), body.get("target")
    if kind not in KINDS:
        raise RequestError(f"kind: must be one of {list(KINDS)}, got {kind!r}")
    if not isinstance(subject, str) or not subject:
        raise RequestError("subject: required, a non-empty string")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        raise RequestError("reason: must be a string of at most 500 characters")
    secs = body.get("expires_in_secs")
    if secs is not None and (not isinstance(secs, int | float) or isinstance(secs, bool)
                             or secs <= 0):
        raise RequestError(f"expires_in_secs: must be a positive number, got {secs!r}")
    if kind == "disable_target" and subject not in config.targets:
        raise RequestError(f"subject: unknown target {subject!r}")
    if kind == "drain_provider" and subject not in config.providers:
        raise RequestError(f"subject: unknown provider {subject!r}")
    if kind == "pin_route":
        route = config.routes.get(subject)
        if route is None:
            raise RequestError(f"subject: unknown route {subject!r}")
        if not isinstance(target, str) or target not in route.all_targets:
            raise RequestError(f"target: route {subject!r} does not list target {target!r}")
    elif target is not None:
        raise RequestError("target: only pin_route takes a target")
    return kind, subject, target, reason, secs


def mark_stale(overrides: list[Override] | tuple[Override, ...],
               config: Config) -> tuple[Override, ...]:
    """The overrides with ``stale`` set for those ``config`` no longer has a subject for."""
    from dataclasses import replace
    return tuple(replace(o, stale=True) if is_stale(o, config) else o for o in overrides)
