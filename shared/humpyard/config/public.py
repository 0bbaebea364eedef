"""What ``GET /v1/config`` shows of the file: the parsed document with every secret
taken out (client key digests, credential-like static headers, proxy credentials)
and the routes as resolved. ``resolve()`` builds it once per load into
``Config.public``."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from humpyard.config.spec import RouteSpec

# Static provider headers whose value is a credential (Azure's ``api-key``, a
# gateway token): ``/v1/config`` shows their names only.
SECRET_HEADER_RE = re.compile(r"key|token|secret|auth|cookie|passw|signature|credential",
                              re.IGNORECASE)


def public_document(file_doc: dict[str, Any], routes: Mapping[str, RouteSpec]) -> dict[str, Any]:
    """``file_doc`` (the parsed file as JSON) made safe to show: key digests dropped,
    credential-like static headers redacted, proxy credentials removed, routes as
    resolved (pools expanded)."""
    data = copy.deepcopy(file_doc)
    for k in data.get("keys", {}).values():
        k.pop("key_sha256", None)
    for p in data.get("providers", {}).values():
        if p.get("proxy"):
            p["proxy"] = _proxy_shown(p["proxy"])
        headers = p.get("headers") or {}
        for name in headers:
            if SECRET_HEADER_RE.search(name):
                headers[name] = "[redacted]"
    data["routes"] = {
        name: {
            "type": r.type, "targets": list(r.targets), "tail": list(r.tail),
            "fallback_on": sorted(r.fallback_on), "implicit": r.implicit,
            **({"allowed_classes": list(r.allowed_classes)} if r.allowed_classes else {}),
            **({"efficient": list(r.efficient), "capable": list(r.capable)}
               if r.efficient else {}),
            **({"judge": r.judge} if r.judge else {}),
        }
        for name, r in routes.items()
    }
    return data


def _proxy_shown(url: str) -> str:
    """A proxy URL without its user and password (``http://[redacted]@host:port``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = "[redacted]@" + netloc.rpartition("@")[2]
    return f"{scheme}://{netloc}{slash}{path}"
