"""Which forward proxy, if any, carries a call: the environment and the provider.

``ProxyRules`` reads ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and
``NO_PROXY`` (each in lower or upper case; the lower-case one wins, as in curl
and httpx) from the mapping it is given, once. A provider's ``proxy`` setting
overrides them (``""``: no proxy). ``NO_PROXY`` is a comma-separated list of
host names (a name matches itself and every name below it; a leading ``.`` or
``*.`` is ignored), IP addresses and CIDR ranges (matched against IP literals),
or ``*`` for every host. Only ``http://`` proxies are spoken (CONNECT for https
upstreams, absolute-form requests for http ones); see docs/upstream.md.

A ``Proxy`` keeps its credentials out of ``repr`` and out of ``address``: only
the ``Proxy-Authorization`` value built from them carries them.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping

from humpyard.config.proxy_url import Proxy, ProxyURLError, parse_proxy

__all__ = ["NoProxy", "Proxy", "ProxyRules", "ProxyURLError", "choose", "parse_proxy"]

log = logging.getLogger("humpyard.upstream")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class NoProxy:
    """A ``NO_PROXY`` list: ``matches(host)`` says whether a host bypasses the proxy."""

    def __init__(self, value: str):
        self.everything = False
        self.names: list[str] = []
        self.networks: list[IPNetwork] = []
        for raw in value.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                self.everything = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(
                    entry.replace("[", "").replace("]", ""), strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                entry = entry[2:]
            self.names.append(entry.lstrip(".").split(":")[0].rstrip("."))

    def matches(self, host: str) -> bool:
        """Whether ``host`` (an ASCII name or an IP literal, no brackets) bypasses."""
        if self.everything:
            return True
        host = host.lower().rstrip(".")
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return any(host == n or host.endswith("." + n) for n in self.names)
        return any(ip in net for net in self.networks) or host in self.names


class ProxyRules:
    """The environment's proxy settings, read once from ``env``."""

    def __init__(self, env: Mapping[str, str]):
        def get(name: str) -> str:
            return (env.get(name.lower()) or env.get(name.upper()) or "").strip()

        self.no_proxy = NoProxy(get("no_proxy"))
        self._by_scheme: dict[str, Proxy | None] = {}
        every = self._read(get("all_proxy"), "ALL_PROXY")
        for scheme in ("http", "https"):
            own = get(f"{scheme}_proxy")
            self._by_scheme[scheme] = self._read(own, f"{scheme.upper()}_PROXY") if own else every

    @staticmethod
    def _read(value: str, name: str) -> Proxy | None:
        if not value:
            return None
        try:
            return parse_proxy(value, name)
        except ProxyURLError as e:  # e.g. a socks5:// meant for other tools
            log.warning("%s is ignored: %s", name, e)
            return None

    def for_host(self, scheme: str, host: str) -> Proxy | None:
        """The proxy for a call to ``scheme://host``, or None to go direct."""
        proxy = self._by_scheme.get(scheme)
        if proxy is None or self.no_proxy.matches(host):
            return None
        return proxy


def choose(setting: str | None, rules: ProxyRules, scheme: str, host: str) -> Proxy | None:
    """A provider's ``proxy`` setting (None: follow ``rules``; "": direct) applied."""
    if setting is None:
        return rules.for_host(scheme, host)
    if not setting:
        return None
    return parse_proxy(setting)
