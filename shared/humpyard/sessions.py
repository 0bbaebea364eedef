"""Session ids: which request header names the conversation (docs/routing.md "Sessions").

The first session header the request carries decides, in this order:
``SESSION_HEADERS``, then Codex's ``x-codex-turn-metadata`` (when it is a
JSON object with a ``session_id`` field), then ``session_id``, then
``x-session-affinity``. An id must be 1 to 256 visible ASCII characters;
any other value is ignored and the request is served without a session: it
never falls through to a later header, so a malformed id cannot borrow
another conversation's state.
"""

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
CODEX_METADATA = "x-codex-turn-metadata"
LATE_HEADERS = ("session_id", "x-session-affinity")
_ABSENT = object()


def _valid(value: object) -> str | None:
    if not isinstance(value, str) or not 1 <= len(value) <= 256:
        return None
    if all(0x21 <= ord(c) <= 0x7E for c in value):
        return value
    return None


def _codex_session(meta: str) -> object:
    """The ``session_id`` field of Codex's turn metadata, or ``_ABSENT``."""
    try:
        data = json.loads(meta)
    except ValueError:
        return _ABSENT
    if not isinstance(data, dict) or "session_id" not in data:
        return _ABSENT
    return data["session_id"]


def session_id(headers: Mapping[str, str]) -> str | None:
    """The id named by the first session header present, or None.

    ``headers`` has lowercased names. A present header with an invalid value
    (empty, too long, not visible ASCII) means no session. ``prompt_cache_key``
    and ``x-client-request-id`` are never session ids.
    """
    for name in SESSION_HEADERS:
        if name in headers:
            return _valid(headers[name])
    meta = headers.get(CODEX_METADATA)
    if meta is not None:
        carried = _codex_session(meta)
        if carried is not _ABSENT:
            return _valid(carried)
    for name in LATE_HEADERS:
        if name in headers:
            return _valid(headers[name])
    return None
