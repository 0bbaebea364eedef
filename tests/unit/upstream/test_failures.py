"""The failure tree is total: every class and every way a socket or TLS can fail maps.

Classification reads class attributes (``upstream/errors.py``), so these tests
enumerate the tree and every exception type the transport can meet while
connecting, reading or writing, and check each lands on a class with a
failure class a route can name, a status that is never 500, and a message
that names the address. No module recognises a failure by its text.
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
from pathlib import Path

import httpx
import pytest

from humpyard.upstream import errors as E
from humpyard.upstream.bridge import as_failure, as_httpx
from humpyard.upstream.classify import ALL_CLASSES, classify_failure
from humpyard.upstream.dial import UNREACHABLE, connect_failure
from humpyard.upstream.proxies import Proxy

SHARED = Path(__file__).resolve().parents[3] / "shared" / "humpyard"


@pytest.mark.parametrize("cls", E.failure_classes(), ids=lambda c: c.__name__)
def test_every_class_classifies(cls: type[E.TransportFailure]) -> None:
    failure = cls("something failed 10.0.0.1:443", "10.0.0.1:443")
    got = classify_failure(failure)
    assert got.failure_class in ALL_CLASSES  # a route's fallback_on can name it
    assert got.next_endpoint
    assert failure.status in (502, 503, 504)
    assert got.never_delivered is failure.never_delivered
    assert issubclass(cls, E.ConnectFailure) <= failure.never_delivered
    assert issubclass(cls, E.ExchangeFailure) <= (not failure.never_delivered)
    assert isinstance(as_httpx(failure, httpx.Request("GET", "http://x")),
                      httpx.TransportError)


def test_the_tree_has_the_classes_the_issue_names() -> None:
    names = {c.__name__ for c in E.failure_classes()}
    assert {"ConnectRefused", "NameNotResolved", "ConnectTimeout", "TLSFailure",
            "TLSVerifyFailed", "HostUnreachable", "ProtocolViolation", "ReadTimeout",
            "ConnectionLost", "TransportClosed", "SlotTimeout", "DecodingFailure"} <= names


def _cert_error() -> ssl.SSLCertVerificationError:
    e = ssl.SSLCertVerificationError(1, "certificate verify failed")
    e.verify_message = "self-signed certificate"
    e.reason = "CERTIFICATE_VERIFY_FAILED"
    return e


def _ssl_error(cls: type[ssl.SSLError] = ssl.SSLError) -> ssl.SSLError:
    e = cls(1, "wrong version number")
    e.reason = "WRONG_VERSION_NUMBER"
    return e


CONNECT_PATHS: list[tuple[BaseException, type[E.TransportFailure], str]] = [
    (TimeoutError(), E.ConnectTimeout, "connect timeout api.example.com:443"),
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), E.NameNotResolved,
     "dns lookup failed api.example.com"),
    (_cert_error(), E.TLSVerifyFailed,
     "TLS certificate verify failed for api.example.com:443: self-signed certificate"),
    (_ssl_error(), E.TLSFailure,
     "TLS handshake failed for api.example.com:443: WRONG_VERSION_NUMBER"),
    (_ssl_error(ssl.SSLEOFError), E.TLSFailure, "TLS handshake failed for"),
    (_ssl_error(ssl.SSLZeroReturnError), E.TLSFailure, "TLS handshake failed for"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), E.ConnectRefused,
     "connect refused api.example.com:443"),
    *[(OSError(code, "x"), E.HostUnreachable, "no route to api.example.com:443")
      for code in sorted(UNREACHABLE)],
    (ConnectionResetError(errno.ECONNRESET, "x"), E.ConnectFailure,
     "connect failed api.example.com:443: the connection was closed during set-up"),
    (ConnectionAbortedError(errno.ECONNABORTED, "x"), E.ConnectFailure, "connect failed"),
    (BrokenPipeError(errno.EPIPE, "x"), E.ConnectFailure, "connect failed"),
    (EOFError(), E.ConnectFailure, "connect failed"),
    (PermissionError(errno.EACCES, "x"), E.ConnectFailure,
     "connect failed api.example.com:443: Permission denied"),
    (OSError("Multiple exceptions: ..."), E.ConnectFailure,
     "connect failed api.example.com:443: OSError"),
    (RuntimeError("anything else"), E.ConnectFailure, "connect failed"),
]


@pytest.mark.parametrize(("exc", "cls", "message"), CONNECT_PATHS,
                         ids=[f"{type(e).__name__}-{i}" for i, (e, _, _) in
                              enumerate(CONNECT_PATHS)])
def test_every_connect_path_maps_to_a_connect_failure(exc: BaseException, cls: type,
                                                      message: str) -> None:
    got = connect_failure(exc, "api.example.com:443", host="api.example.com")
    assert type(got) is cls and isinstance(got, E.ConnectFailure)
    assert got.message.startswith(message)
    assert got.never_delivered and got.status in (502, 504)


def test_a_proxy_refusing_is_a_proxy_failure_without_its_credentials() -> None:
    via = Proxy("proxy.corp", 3128, b"Basic dTpzM2NyZXQ=")
    got = connect_failure(ConnectionRefusedError(errno.ECONNREFUSED, "x"), "api.x:443",
                          via=via)
    assert isinstance(got, E.ProxyFailure)
    assert "proxy.corp:3128" in got.message and "dTpz" not in got.message
    assert "dTpz" not in repr(via)


HTTPX_PATHS: list[tuple[httpx.HTTPError, type[E.TransportFailure]]] = [
    (httpx.ConnectTimeout("x"), E.ConnectTimeout),
    (httpx.PoolTimeout("x"), E.ConnectTimeout),
    (httpx.ReadTimeout("x"), E.ReadTimeout),
    (httpx.WriteTimeout("x"), E.WriteTimeout),
    (httpx.ProxyError("x"), E.ProxyFailure),
    (httpx.ConnectError("x"), E.ConnectFailure),
    (httpx.UnsupportedProtocol("x"), E.UnsupportedURL),
    (httpx.DecodingError("x"), E.DecodingFailure),
    (httpx.RemoteProtocolError("x"), E.ConnectionLost),
    (httpx.ReadError("x"), E.ConnectionLost),
    (httpx.WriteError("x"), E.ConnectionLost),
    (httpx.CloseError("x"), E.ConnectionLost),
    (httpx.LocalProtocolError("x"), E.ProtocolViolation),
    (httpx.TooManyRedirects("x"), E.ProtocolViolation),
]


@pytest.mark.parametrize(("exc", "cls"), HTTPX_PATHS, ids=[type(e).__name__ for e, _ in
                                                           HTTPX_PATHS])
def test_every_httpx_failure_maps_by_class(exc: httpx.HTTPError, cls: type) -> None:
    assert type(as_failure(exc, "https://api.example.com/v1")) is cls


@pytest.mark.parametrize(("cause", "cls"), [
    (socket.gaierror(socket.EAI_NONAME, "x"), E.NameNotResolved),
    (_cert_error(), E.TLSVerifyFailed),
    (_ssl_error(), E.TLSFailure),
    (ConnectionRefusedError(errno.ECONNREFUSED, "x"), E.ConnectRefused),
    (OSError(errno.EHOSTUNREACH, "x"), E.HostUnreachable),
    (OSError("Multiple exceptions: [Errno 111] refused"), E.ConnectFailure),
])
def test_an_httpx_connect_error_maps_by_its_cause(cause: BaseException, cls: type) -> None:
    try:
        try:
            raise cause
        except BaseException as c:
            raise httpx.ConnectError("whatever the text says: refused") from c
    except httpx.ConnectError as e:
        assert type(as_failure(e, "https://api.example.com/v1")) is cls


def test_no_upstream_failure_is_recognised_by_its_text() -> None:
    pattern = re.compile(r"""in str\((e|exc|err|error)\)|str\((e|exc)\)\.lower\(\)""")
    places = ("upstream", "executor", "health", "quota")
    offenders = [f"{p.relative_to(SHARED)}:{n}" for place in places
                 for p in (SHARED / place).rglob("*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


@pytest.mark.parametrize("cls", E.failure_classes(), ids=lambda c: c.__name__)
def test_a_kept_failure_is_raised_as_a_copy_without_its_traceback(cls: type) -> None:
    """``again()``: what a connection keeps and raises to each caller is copied
    (type, message, address, any field), so the kept one never carries a raise's
    traceback, whose frames would refer back to the connection."""
    kept = cls("connection reset 10.0.0.1:443", "10.0.0.1:443")
    kept.detail = "kept"
    for _ in range(2):
        with pytest.raises(cls) as raised:
            raise kept.again()
        e = raised.value
        assert e is not kept and type(e) is cls
        assert (str(e), e.message, e.address, e.detail) == (
            "connection reset 10.0.0.1:443", "connection reset 10.0.0.1:443", "10.0.0.1:443",
            "kept")
        assert e.__traceback__ is not None
    assert kept.__traceback__ is None
