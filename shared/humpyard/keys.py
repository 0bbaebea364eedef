"""Client keys: constant-time matching of a presented key against the configured ones."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from humpyard.config.spec import KeySpec
from humpyard.errors import AuthError


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key from ``Authorization: Bearer`` or ``x-api-key`` (lowercased names)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key else None


def authenticate(keys: Mapping[str, KeySpec], headers: Mapping[str, str]) -> KeySpec | None:
    """The matching key, None on an open gateway; ``AuthError`` otherwise.

    Every configured key is compared (no early exit) with ``hmac.compare_digest``
    on SHA-256 digests, so timing says nothing about which key, if any, matched.
    """
    if not keys:
        return None
    value = presented_key(headers)
    if value is None:
        raise AuthError("missing API key: send Authorization: Bearer <key> or x-api-key")
    digest = hashlib.sha256(value.encode("utf-8", errors="surrogateescape")).digest()
    found: KeySpec | None = None
    for spec in keys.values():
        if hmac.compare_digest(digest, spec.digest) and found is None:
            found = spec
    if found is None:
        raise AuthError("invalid API key")
    return found
