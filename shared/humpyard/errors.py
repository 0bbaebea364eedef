"""The one error root of humpyard.

Every error the gateway raises on purpose derives from ``HumpyardError`` and
carries the HTTP status and machine code the client sees. ``http/errors.py``
is the only place that turns them into responses::

    HumpyardError
    ├── ConfigError                 (load/reload: names the key and value)
    ├── RequestError        400     (malformed body; names the field)
    │   ├── BodyTimeout     408     (``serve`` cut a body still arriving)
    │   ├── BodyMalformed   400     (``serve``'s parser refused a body's framing)
    │   ├── PayloadTooLarge 413
    │   └── UnsupportedEncoding 415
    ├── AuthError           401
    ├── ForbiddenError      403
    ├── UnknownModel        404
    ├── ConflictError       409
    ├── PlanRefused                 (planning refused before any upstream call)
    │   ├── NoCapableTarget     400 no_capable_target
    │   ├── NoEligibleTarget    503 no_eligible_target
    │   ├── OverrideNoTarget    503 override_no_target
    │   └── BudgetExhausted     429 budget_exhausted
    ├── RateLimited         429     (a key's rpm/tpm/parallel limit; ``limit`` names it)
    ├── UpstreamError               (every attempt failed; carries the last one)
    └── StoreError          500     (a backend failed)
        └── StoreUnavailable 503    (it could not be reached, or asked to slow down)
            └── StoreBusy   503     (SQLite: the file's write lock is held elsewhere)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar


class HumpyardError(Exception):
    """Base of every deliberate humpyard error: a message, an HTTP status, a code."""

    status: int = 500
    code: str = "internal_error"
    type: str = "api_error"
    retry_after: float | None = None  # seconds; sent as a Retry-After header when set
    headers: ClassVar[Mapping[str, str] | None] = None  # more response headers to send

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class ConfigError(HumpyardError):
    """A configuration file is invalid; the message names the key and the bad value."""

    code = "invalid_config"


class RequestError(HumpyardError):
    """The client's request is malformed; the message names the field."""

    status = 400
    code = "invalid_request"
    type = "invalid_request_error"


class BodyTimeout(RequestError):
    """The request body did not arrive within ``[server] body_timeout_secs`` of its
    head (``humpyard serve`` cut the connection: ``guarded.py``)."""

    status = 408
    code = "request_timeout"


class BodyMalformed(RequestError):
    """The request body's framing is not HTTP/1.1 (a transfer coding that does not
    end in ``chunked``, a chunk llhttp refused): ``humpyard serve`` answered the 400
    and closed the connection (``guarded.py``)."""

    code = "bad_request"


class PayloadTooLarge(RequestError):
    """The request body is over ``max_body_bytes``."""

    status = 413
    code = "payload_too_large"


class UnsupportedEncoding(RequestError):
    """The request body comes in a content coding the gateway does not undo (it
    takes identity, gzip and deflate); ``headers`` says which it accepts."""

    status = 415
    code = "unsupported_encoding"
    headers: ClassVar[Mapping[str, str] | None] = MappingProxyType(
        {"accept-encoding": "gzip, deflate"})


class UnsupportedTransferCoding(RequestError):
    """The request body comes in a transfer coding, before ``chunked``, that the
    gateway does not undo (RFC 9112, 6.1: a 501)."""

    status = 501
    code = "unsupported_transfer_coding"


class AuthError(HumpyardError):
    """Missing or invalid client key."""

    status = 401
    code = "invalid_api_key"
    type = "authentication_error"


class ForbiddenError(HumpyardError):
    """The key may not use this route or surface."""

    status = 403
    code = "forbidden"
    type = "permission_error"


class UnknownModel(HumpyardError):
    """The requested model names no route or target."""

    status = 404
    code = "unknown_model"
    type = "not_found_error"


class ConflictError(HumpyardError):
    """The operation cannot be done in the gateway's current shape (e.g. no ledger)."""

    status = 409
    code = "conflict"
    type = "invalid_request_error"


class PlanRefused(HumpyardError):
    """Planning refused the request before any upstream call."""

    status = 503
    type = "api_error"


class NoCapableTarget(PlanRefused):
    status = 400
    code = "no_capable_target"
    type = "invalid_request_error"


class NoEligibleTarget(PlanRefused):
    status = 503
    code = "no_eligible_target"


class OverrideNoTarget(PlanRefused):
    status = 503
    code = "override_no_target"


class BudgetExhausted(PlanRefused):
    status = 429
    code = "budget_exhausted"
    type = "rate_limit_error"


class RateLimited(HumpyardError):
    """A key's own limit refused the request: ``limit`` is ``rpm_limit``,
    ``tpm_limit`` or ``max_parallel_requests`` (docs/routing.md, "Per-key limits")."""

    status = 429
    code = "rate_limit_exceeded"
    type = "rate_limit_error"

    def __init__(self, message: str, *, limit: str, retry_after: float):
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after


class UpstreamError(HumpyardError):
    """Every attempt failed; status and message are the last upstream error's."""

    type = "api_error"
    upstream_type: str | None = None  # the type the upstream gave its error, if any

    def __init__(self, message: str, *, status: int, code: str = "upstream_error",
                 failure_class: str | None = None):
        super().__init__(message, status=status, code=code)
        self.failure_class = failure_class


class StoreError(HumpyardError):
    """A store backend failed."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The store did not answer, or asked to slow down, through all of its own retries
    (DynamoDB: no connection, a reset, a timeout, throttling, a 5xx). Nothing is wrong
    with what was asked: the same call may succeed later, so the ledger writer keeps
    what it could not write and tries again (docs/decisions/0006-ledger-overload.md)."""

    status = 503
    code = "store_unavailable"


class BudgetUnknown(StoreUnavailable):
    """A budgeted key's request while the store cannot be reached and has never told
    this process the key's spend: admitting it on a spend of 0 could pass the budget,
    so it is planned as for a spent budget (a free target serves it) or refused 503."""

    retry_after = 5.0

    def __init__(self, key_id: str) -> None:
        super().__init__(f"the budget of key {key_id} cannot be checked: the store has not "
                         "answered since this process started; try again shortly")
        self.key_id = key_id


class StoreBusy(StoreUnavailable):
    """The store could not take its write lock in time (SQLite: another process holds
    the file's write lock); nothing was written, so the write may simply be retried."""
