"""AWS credentials and SigV4 signatures for Amazon Bedrock calls.

A provider with ``protocol = "bedrock"`` has no key: each call is signed with
SigV4 by botocore's own signer (``botocore.auth.SigV4Auth`` on an
``AWSRequest``) with credentials from botocore's standard chain (environment,
shared config and SSO profiles, container and Lambda role credentials, the
instance metadata service). Refreshable credentials (a role's, SSO's) are
refreshed by botocore before they expire; a refresh may call the network, so it
runs in a worker thread, never on the event loop.

Only the signature headers come from here (``X-Amz-Date``, ``X-Amz-Security-Token``
when there is a session token, ``Authorization``); the call itself goes through
the gateway's own transport (``upstream/client.py``). Credentials are never
logged (botocore's signer's DEBUG records, which quote the session token, are
dropped), and no message here names one. botocore is the ``[aws]`` extra: it is
imported only when a Bedrock call is signed (``config/resolve.py`` refuses a
Bedrock provider when it is not installed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from humpyard.upstream.errors import TransportFailure

SERVICE = "bedrock"
"""The signing name of the ``bedrock-runtime`` endpoints."""

SIGNED = ("x-amz-date", "x-amz-security-token", "authorization")
"""The headers a signature adds to a request."""


class _NoSigningDetails(logging.Filter):
    """botocore's signer logs the canonical request at DEBUG, and with it the session
    token (``x-amz-security-token``): those records never leave ``botocore.auth``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


_AUTH_LOG = logging.getLogger("botocore.auth")
if not any(isinstance(f, _NoSigningDetails) for f in _AUTH_LOG.filters):
    _AUTH_LOG.addFilter(_NoSigningDetails())


class NoCredentials(TransportFailure):
    """The standard AWS chain gave no credentials (or failed to): nothing was sent."""

    failure_class = "unavailable"
    counts_for_health = False
    status = 503


USED_KEPT = 8
"""How many secret strings of past credentials ``AwsSigner.used`` keeps (answers to calls
signed before a refresh may quote them)."""


class AwsSigner:
    """One process's AWS credentials, resolved on first use, and the signer.

    botocore's chain reads the process environment; ``credentials`` (any object
    with ``get_frozen_credentials()``) may be given instead."""

    def __init__(self, credentials: Any = None):
        self._credentials = credentials
        self._lock = asyncio.Lock()
        # The secret parts of the credentials calls were signed with, newest last: an
        # upstream may quote them back (a signature mismatch quotes the canonical
        # request, session token included), and they are redacted from what it said.
        self.used: tuple[str, ...] = ()

    def _resolve(self) -> Any:
        from botocore.session import Session

        try:
            return Session().get_credentials()
        except Exception as e:  # botocore's chain failures: a profile, SSO, the role
            raise NoCredentials(f"AWS credentials could not be resolved "
                                f"({type(e).__name__})") from None

    async def frozen(self) -> Any:
        """The current credentials (access key, secret key, token), refreshed when due."""
        creds = self._credentials
        if creds is None:
            async with self._lock:
                if self._credentials is None:
                    self._credentials = await asyncio.to_thread(self._resolve)
                creds = self._credentials
            if creds is None:
                raise NoCredentials("no AWS credentials: the standard chain (environment, "
                                    "profile, container or instance role) gave none")
        refresh_needed = getattr(creds, "refresh_needed", None)
        try:
            if refresh_needed is not None and refresh_needed():
                return await asyncio.to_thread(creds.get_frozen_credentials)
            return creds.get_frozen_credentials()
        except TransportFailure:
            raise
        except Exception as e:
            raise NoCredentials(f"AWS credentials could not be refreshed "
                                f"({type(e).__name__})") from None

    async def sign(self, region: str, url: str, host: str, body: bytes,
                   headers: Mapping[str, str]) -> list[tuple[str, str]]:
        """The signature headers for a POST of ``body`` to ``url`` (its ``Host``
        header ``host``), also signing ``headers`` (sent as they are)."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        creds = await self.frozen()
        secret = tuple(s for s in (creds.secret_key, creds.token) if s)
        if not set(secret) <= set(self.used):  # a refresh: the older ones kept a while
            self.used = (*self.used, *secret)[-USED_KEPT:]
        req = AWSRequest(method="POST", url=url, data=body, headers={"host": host, **headers})
        SigV4Auth(creds, SERVICE, region).add_auth(req)
        return [(name, req.headers[name]) for name in SIGNED if name in req.headers]
