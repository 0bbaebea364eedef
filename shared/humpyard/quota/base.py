"""What a quota source is, what it returns, and where the key may be sent.

A source reads one provider's usage windows. It never raises for anything
the provider does (slow, down, refusing, nonsense): it returns a
``QuotaReading`` with ``error`` set to a reason a person can act on. Readings
and reasons never contain the provider's key.

``SOURCES`` (the registry: ``quota_source`` name → source) is importable
from here and from ``humpyard.quota``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx

    from humpyard.config.spec import ProviderSpec


@dataclass(frozen=True, slots=True)
class Window:
    """One usage window: ``percent`` used (0-100), the provider's status text, and
    when it resets (epoch seconds, or None when the provider does not say)."""

    percent: float
    status: str
    resets_at: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaReading:
    """The outcome of one read: ``windows`` by name when it worked, else ``error``."""

    windows: dict[str, Window] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the read worked (``error`` is None)."""
        return self.error is None

    @classmethod
    def failed(cls, reason: str) -> QuotaReading:
        """A reading that carries only the reason it failed."""
        return cls(windows={}, error=reason)


class QuotaSource(Protocol):
    """Reads a provider's quota windows.

    ``fetch`` must finish within ``timeout`` seconds (the poller also enforces
    it), must not raise for provider-side problems, and sends the provider's
    key only to a destination that ``key_destination_refusal`` accepts.
    """

    name: str

    async def fetch(self, client: httpx.AsyncClient, provider: ProviderSpec,
                    timeout: float) -> QuotaReading: ...


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_destination_refusal(url: str, base_url: str) -> str | None:
    """Why a key must not be sent to ``url``, or None when it may.

    It may go only to the host (and port) of the provider's own ``base_url``,
    over https, or over plain http when that host is a loopback host.
    """
    try:
        dest, own = urlsplit(url), urlsplit(base_url)
        dest_port, own_port = dest.port, own.port
    except ValueError:
        return "the provider URL is not a valid URL; the key is not sent"
    host = (dest.hostname or "").lower()
    if not host or (host, dest_port, dest.scheme) != (
            (own.hostname or "").lower(), own_port, own.scheme):
        return "the quota URL is not on the provider's own host; the key is not sent"
    if dest.scheme == "https":
        return None
    if dest.scheme == "http" and is_loopback_host(host):
        return None
    return (f"the provider URL uses {dest.scheme or 'no scheme'}, and the key is only sent "
            "over https (plain http only to a loopback host); not polled")


def __getattr__(name: str) -> Any:
    # The registry imports the sources, which import this module; resolve it lazily.
    if name == "SOURCES":
        from humpyard.quota import SOURCES

        return SOURCES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
