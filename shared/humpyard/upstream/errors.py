"""Why an upstream call got no usable answer: one tree of exception classes.

Every failure the upstream client raises is a ``TransportFailure``; what it
means is carried by its class, never by its message::

    TransportFailure                      (never raised itself)
    ├── ConnectFailure                    nothing was sent: re-sendable
    │   ├── ConnectRefused                connection refused
    │   ├── NameNotResolved               DNS lookup failed
    │   ├── HostUnreachable               no route to host, network down or unreachable
    │   ├── ConnectTimeout                no connection within connect_timeout_secs
    │   ├── TLSFailure                    the TLS handshake failed (e.g. TLS to a plain port)
    │   │   └── TLSVerifyFailed           the certificate is not trusted, expired, wrong name
    │   ├── ProxyFailure                  the proxy refused or broke the CONNECT tunnel
    │   ├── TransportClosed               the client was closed
    │   └── UnsupportedURL                the URL cannot be called (scheme, host)
    ├── SlotTimeout                       no concurrency slot within slot_wait_secs (unsent)
    └── ExchangeFailure                   the request may have reached the upstream
        ├── WriteTimeout
        ├── ReadTimeout
        │   ├── FirstByteTimeout          no answer head within first_byte_timeout_secs
        │   └── IdleTimeout               no body byte within idle_timeout_secs
        ├── ConnectionLost                reset, or closed before the answer ended
        ├── ProtocolViolation             an answer HTTP/1.1 does not allow
        ├── DecodingFailure               a gzip/deflate body that does not decode
        └── AnswerTooLarge                an answer past one of the gateway's limits
            ├── BodyTooLarge              a buffered body over max_response_bytes
            ├── DecompressionBomb         inflated/compressed over max_decompression_ratio
            └── EventTooLarge             one event-stream event over max_sse_event_bytes

Each class states, as class attributes, its ``failure_class`` (a name a route's
``fallback_on`` may list), whether it ``counts_for_health``, whether the request
was ``never_delivered`` (then re-sending it is free: docs/health.md,
"Never-delivered re-sends"), and the ``status`` the client sees when nothing else
answers. A subclass inherits them, so a new class can never be missing from a
table. ``str(e)`` names the cause and the address, never a credential.
"""

from __future__ import annotations

from typing import ClassVar, Self


class TransportFailure(Exception):
    """The root of every upstream failure; see the module docstring for the tree."""

    failure_class: ClassVar[str] = "connection"
    counts_for_health: ClassVar[bool] = True
    never_delivered: ClassVar[bool] = False
    status: ClassVar[int] = 502

    def __init__(self, message: str, address: str = ""):
        super().__init__(message)
        self.message = message
        self.address = address  # host:port, or "" when there is none

    def again(self) -> Self:
        """A copy of this failure to raise (same type, message and fields, no
        traceback): a failure an object keeps and raises to every later caller
        (``Conn.failure``) must not carry the traceback of a raise, whose frames
        refer back to the object (a reference cycle per failed request, left for
        the garbage collector with the request's buffers)."""
        copy = type(self).__new__(type(self), *self.args)
        copy.__dict__.update(self.__dict__)
        return copy


class ConnectFailure(TransportFailure):
    """No connection was made: no byte of the request left the gateway."""

    never_delivered = True


class ConnectRefused(ConnectFailure):
    """The upstream's host refused the connection (nothing listens on the port)."""


class NameNotResolved(ConnectFailure):
    """The host name did not resolve."""


class HostUnreachable(ConnectFailure):
    """No route to the host, or the network is down or unreachable."""


class ConnectTimeout(ConnectFailure):
    """No connection (TCP, proxy tunnel and TLS handshake) within the connect timeout."""

    failure_class = "timeout"
    status = 504


class TLSFailure(ConnectFailure):
    """The TLS handshake failed (a plain-HTTP port, no common protocol, a closed socket)."""


class TLSVerifyFailed(TLSFailure):
    """The upstream's certificate was not trusted (unknown CA, expired, another name)."""


class ProxyFailure(ConnectFailure):
    """The forward proxy could not be reached or refused the tunnel."""


class TransportClosed(ConnectFailure):
    """The upstream client was closed; nothing more can be sent through it."""


class UnsupportedURL(ConnectFailure):
    """The URL cannot be called (a scheme other than http/https, no host)."""


class SlotTimeout(TransportFailure):
    """No concurrency slot (``max_concurrent``) freed within ``[router] slot_wait_secs``.

    Nothing was sent, but the limit is the gateway's own: it never counts
    against the endpoint's health, and re-dialling would only wait again.
    """

    failure_class = "rate_limit"
    counts_for_health = False
    never_delivered = True
    status = 503


class ExchangeFailure(TransportFailure):
    """The request was (or may have been) written: re-sending it is never free."""


class WriteTimeout(ExchangeFailure):
    """The request could not be written within the timeout."""

    failure_class = "timeout"
    status = 504


class ReadTimeout(ExchangeFailure):
    """No byte of the answer within the read timeout (or the whole call took too long)."""

    failure_class = "timeout"
    status = 504


class ConnectionLost(ExchangeFailure):
    """The connection was reset, or closed before the answer was complete."""


class ProtocolViolation(ExchangeFailure):
    """The upstream answered something HTTP/1.1 does not allow (or a header too large)."""


class DecodingFailure(ExchangeFailure):
    """A body declared as gzip or deflate did not decode."""


class FirstByteTimeout(ReadTimeout):
    """A streamed call's answer head did not come within ``first_byte_timeout_secs``."""


class IdleTimeout(ReadTimeout):
    """No byte of an answer's body within ``idle_timeout_secs`` of the previous one."""


class AnswerTooLarge(ExchangeFailure):
    """An answer went past one of the gateway's own limits on what it holds
    (docs/upstream.md, "Limits on answers"); reading stopped there. Counted
    against the endpoint like any answer that cannot be used."""


class BodyTooLarge(AnswerTooLarge):
    """A buffered body (after decoding), or a stream's held-back start, over
    ``max_response_bytes``."""


class DecompressionBomb(AnswerTooLarge):
    """A gzip/deflate body that inflates more than ``max_decompression_ratio``
    times its compressed size (checked once 256 KiB have come out)."""


class EventTooLarge(AnswerTooLarge):
    """One event of an event stream (or one line of it) over ``max_sse_event_bytes``."""


def failure_classes() -> list[type[TransportFailure]]:
    """Every class of the tree, the root first (for tests and documentation)."""
    out: list[type[TransportFailure]] = [TransportFailure]
    i = 0
    while i < len(out):
        out.extend(out[i].__subclasses__())
        i += 1
    return out
