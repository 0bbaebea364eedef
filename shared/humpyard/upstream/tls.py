"""TLS trust for upstream calls: which CAs, and which client certificate.

The default trust is httpx's: ``SSL_CERT_FILE`` if set, else ``SSL_CERT_DIR``,
else certifi's bundle (``env`` is the mapping these are read from). A
provider's ``ca_file`` replaces it for that provider; ``client_cert`` (and
``client_key``, when the key is not in the same file) is presented to
upstreams that ask for one (mutual TLS). Contexts are built on first use and
shared by every connection with the same settings. See docs/upstream.md.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import NamedTuple


class TLSOptions(NamedTuple):
    """A provider's TLS settings; ``TLSOptions()`` is the default trust, no client cert."""

    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None


DEFAULT_TLS = TLSOptions()


def build_context(options: TLSOptions, env: Mapping[str, str]) -> ssl.SSLContext:
    """A client context for ``options``; raises ``OSError``/``ssl.SSLError`` for files
    that cannot be read."""
    if options.ca_file:
        ctx = ssl.create_default_context(cafile=options.ca_file)
    elif env.get("SSL_CERT_FILE"):
        ctx = ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
    elif env.get("SSL_CERT_DIR"):
        ctx = ssl.create_default_context(capath=env["SSL_CERT_DIR"])
    else:
        ctx = ssl.create_default_context(cafile=_certifi())
    if options.client_cert:
        ctx.load_cert_chain(options.client_cert, options.client_key)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _certifi() -> str | None:
    try:
        import certifi
    except ImportError:  # the system's store then
        return None
    return certifi.where()
