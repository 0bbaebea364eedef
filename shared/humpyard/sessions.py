"""Session ids: which request header names the conversation (DESIGN "Sessions")."""

from __future__ import annotations

import json
from collections.abc import Mapping

SESSION_HEADERS = (
    "x-switchyard-session-id",
    "x-claude-code-session-id",
    "x-nemo-relay-session-id",
    "x-session-id",
    "session-id",
)


def _valid(value: object) -> str | None:
    if not isinstance(value, str) or not 1 <= len(value) <= 256:
        return None
    if all(0x21 <= ord(c) <= 0x7E for c in value):
        return value
    return None


def session_id(headers: Mapping[str, str]) -> str | None:
    """The first valid id, in DESIGN.md's order; invalid values are skipped.

    ``headers`` has lowercased names. ``prompt_cache_key`` and
    ``x-client-request-id`` are never session ids.
    """
    for name in SESSION_HEADERS:
        sid = _valid(headers.get(name))
        if sid:
            return sid
    meta = headers.get("x-codex-turn-metadata")
    if meta:
        try:
            sid = _valid(json.loads(meta).get("session_id"))
        except (ValueError, AttributeError):
            sid = None
        if sid:
            return sid
    for name in ("session_id", "x-session-affinity"):
        sid = _valid(headers.get(name))
        if sid:
            return sid
    return None
