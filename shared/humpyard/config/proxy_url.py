"""A forward proxy's URL, read once: where to dial and the credentials' header.

Shared by the configuration's check of a provider's ``proxy`` (``provider_models.py``)
and by the upstream client's proxy rules (``upstream/proxies.py``). A
``Proxy`` keeps its credentials out of ``repr`` and out of ``address``: only
the ``Proxy-Authorization`` value built from them carries them.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit


class ProxyURLError(ValueError):
    """A proxy URL that cannot be used; the message never repeats credentials."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP forward proxy: ``host`` and ``port`` to dial, and its credentials' header."""

    host: str
    port: int
    authorization: bytes | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 in brackets), safe to show."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_proxy(url: str, where: str = "proxy") -> Proxy:
    """``http://[user:password@]host[:port]`` (no scheme means http) as a ``Proxy``.

    Raises ``ProxyURLError`` naming ``where`` for any other scheme or a URL without
    a host; the message shows the scheme and host only."""
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ProxyURLError(f"{where}: not a proxy URL (http://host:port)") from None
    if parts.scheme.lower() != "http":
        raise ProxyURLError(f"{where}: proxy scheme {parts.scheme!r} is not supported "
                            "(only http:// proxies)")
    if not parts.hostname:
        raise ProxyURLError(f"{where}: the proxy URL names no host")
    auth = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        auth = b"Basic " + base64.b64encode(pair.encode("utf-8"))
    return Proxy(parts.hostname, port or 80, auth)
