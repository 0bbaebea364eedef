"""Opening a connection: names, Happy Eyeballs, proxy tunnels, TLS, and why it failed.

``dial`` resolves the host, races its addresses (RFC 8305 Happy Eyeballs:
address families interleaved, the next attempt started ``EYEBALLS_DELAY``
seconds after the previous one unless it already failed), goes through the
forward proxy when the origin has one (a CONNECT tunnel for https; for http the
request itself is sent to the proxy in absolute form), then does the TLS
handshake for https. All of it is bounded by the connect timeout.

Every exception on the way becomes a ``ConnectFailure`` by its type
(``connect_failure``), with a message that names the cause and the address.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable
from typing import NamedTuple

from humpyard.upstream.connection import Conn
from humpyard.upstream.errors import (
    ConnectFailure,
    ConnectRefused,
    ConnectTimeout,
    HostUnreachable,
    NameNotResolved,
    ProxyFailure,
    TLSFailure,
    TLSVerifyFailed,
    TransportFailure,
)
from humpyard.upstream.framing import ResponseParser
from humpyard.upstream.proxies import Proxy
from humpyard.upstream.tls import TLSOptions

EYEBALLS_DELAY = 0.25  # seconds, RFC 8305's recommended connection attempt delay
UNREACHABLE = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN,
                         errno.EHOSTDOWN, errno.EADDRNOTAVAIL})


class Origin(NamedTuple):
    """Where a request goes, and how: the pool keeps connections per ``Origin``.

    ``host`` is ASCII (IDNA 2008 for names; an IPv6 literal without brackets).
    """

    scheme: str
    host: str
    port: int
    proxy: Proxy | None = None
    tls: TLSOptions | None = None

    @property
    def absolute_form(self) -> bool:
        """Requests go to the proxy with the full URL as target (an http upstream behind
        a proxy); an https one is tunnelled with ``CONNECT`` instead."""
        return self.proxy is not None and self.scheme == "http"

    @property
    def address(self) -> str:
        """``host:port`` as shown in failures (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def connect_failure(e: BaseException, address: str, *, host: str = "",
                    via: Proxy | None = None) -> TransportFailure:
    """The ``ConnectFailure`` for an exception raised while connecting to ``address``.

    Total: any exception maps (an unexpected one to ``ConnectFailure`` itself).
    """
    if isinstance(e, TransportFailure):
        return e
    to = f"{address} via proxy {via.address}" if via is not None else address
    if isinstance(e, TimeoutError):
        return ConnectTimeout(f"connect timeout {to}", address)
    if isinstance(e, socket.gaierror):
        return NameNotResolved(f"dns lookup failed {host or address}", address)
    if isinstance(e, ssl.SSLCertVerificationError):
        why = e.verify_message or e.reason or "untrusted"
        return TLSVerifyFailed(f"TLS certificate verify failed for {address}: {why}", address)
    if isinstance(e, ssl.SSLError):
        why = e.reason or type(e).__name__
        return TLSFailure(f"TLS handshake failed for {address}: {why}", address)
    if isinstance(e, ConnectionRefusedError):
        if via is not None:
            return ProxyFailure(f"proxy {via.address} refused the connection "
                                f"(for {address})", address)
        return ConnectRefused(f"connect refused {address}", address)
    if isinstance(e, OSError) and e.errno in UNREACHABLE:
        return HostUnreachable(f"no route to {to}: {os.strerror(e.errno or 0)}", address)
    if isinstance(e, ConnectionError | EOFError):
        return ConnectFailure(f"connect failed {to}: the connection was closed "
                              "during set-up", address)
    if isinstance(e, OSError) and e.errno:
        return ConnectFailure(f"connect failed {to}: {os.strerror(e.errno)}", address)
    return ConnectFailure(f"connect failed {to}: {type(e).__name__}", address)


async def _open_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking socket to ``host:port`` (Happy Eyeballs over its addresses)."""
    loop = asyncio.get_running_loop()
    infos = _literal(host, port) or await loop.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, "no address")
    addrs = _interleave(infos)
    if len(addrs) == 1:  # nothing to race: no tasks at all
        return await _connect(loop, addrs[0])
    return await _race(loop, addrs)


async def _race(loop: asyncio.AbstractEventLoop, addrs: list) -> socket.socket:  # type: ignore[type-arg]
    """RFC 8305's race: an attempt per address, the next started ``EYEBALLS_DELAY``
    after the last unless one failed first; the first connected socket wins and
    every other attempt is cancelled (``_connect`` closes its socket) or, if it
    connected too, closed. Not ``asyncio.staggered``: its closures and tasks hold
    each other, so every raced dial left them for the collector (ADR 0030). Here
    no attempt refers back to this frame, and the failure raised when every
    address failed is held by nothing here once raised."""
    pending: set[asyncio.Task[socket.socket]] = set()
    failures: list[BaseException] = []
    rest = iter(addrs)
    try:
        while True:
            info = next(rest, None)
            if info is not None:
                pending.add(loop.create_task(_connect(loop, info)))
            elif not pending:
                break
            done, pending = await asyncio.wait(
                pending, timeout=EYEBALLS_DELAY if info is not None else None,
                return_when=asyncio.FIRST_COMPLETED)
            won = _settle(done, failures)
            del done
            if won is not None:
                return won
    finally:
        for task in pending:
            if task.cancel() or task.cancelled():
                continue
            # It finished as the race was cut short from outside (wait never returned
            # it): its failure is taken, its connected socket closed.
            if task.exception() is None:
                task.result().close()
        del pending
    raise _pick(failures)


def _settle(done: set[asyncio.Task[socket.socket]], failures: list[BaseException]
            ) -> socket.socket | None:
    """The first connected socket among finished attempts (any other one connected
    is closed); the failures of the rest go to ``failures``."""
    won = None
    for task in done:
        if task.cancelled():  # not by this race; nothing to keep
            continue
        error = task.exception()
        if error is not None:
            failures.append(error)
        elif won is None:
            won = task.result()
        else:
            task.result().close()
    return won


async def _connect(loop: asyncio.AbstractEventLoop, info: tuple) -> socket.socket:  # type: ignore[type-arg]
    """One address, connected; the socket is closed if that fails or is cancelled.
    Its failure refers to nothing that refers back to it, so a refused dial leaves
    no reference cycle."""
    family, type_, proto, _, address = info
    sock = socket.socket(family, type_, proto)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


def _literal(host: str, port: int) -> list[tuple] | None:  # type: ignore[type-arg]
    """The address of an IP literal without a resolver call (which runs in a thread)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 4:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]
    return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port, 0, 0))]


def _interleave(infos: list) -> list:  # type: ignore[type-arg]
    """Addresses alternating between families, the first family first (RFC 8305 §4)."""
    first = infos[0][0]
    a = [i for i in infos if i[0] == first]
    b = [i for i in infos if i[0] != first]
    out: list = []  # type: ignore[type-arg]
    for i in range(max(len(a), len(b))):
        out.extend(x[i] for x in (a, b) if i < len(x))
    return out


def _pick(errors: list[BaseException]) -> BaseException:
    """The failure to report when every address failed: a refusal if all refused, else
    the first that is not one (it says more), else the first. ``errors`` is emptied,
    so the frame that raises the one picked holds none of them."""
    if not errors:
        return OSError(errno.ECONNREFUSED, "no address could be tried")
    others = [e for e in errors if not isinstance(e, ConnectionRefusedError)]
    picked = others[0] if others else errors[0]
    errors.clear()
    return picked


async def dial(origin: Origin, timeout: float | None,
               context: Callable[[TLSOptions | None], ssl.SSLContext]) -> Conn:
    """A connected (and, for https, TLS-established) ``Conn`` to ``origin``."""
    address = origin.address
    proxy = origin.proxy
    try:
        async with asyncio.timeout(timeout):
            if proxy is None:
                sock = await _open_socket(origin.host, origin.port)
            else:
                try:
                    sock = await _open_socket(proxy.host, proxy.port)
                except TimeoutError:
                    raise
                except BaseException as e:
                    f = connect_failure(e, proxy.address, host=proxy.host)
                    raise ProxyFailure(f"proxy unreachable for {address}: {f.message}",
                                       address) from e
            return await _handshake(origin, sock, context)
    except TransportFailure:
        raise  # already ours (a proxy's refusal): ``raise e from e`` would make it its own cause
    except (OSError, EOFError, ssl.SSLError) as e:
        raise connect_failure(e, address, host=origin.host, via=proxy) from e


async def _handshake(origin: Origin, sock: socket.socket,
                     context: Callable[[TLSOptions | None], ssl.SSLContext]) -> Conn:
    conn = Conn(origin.address, sock)
    try:
        return await _set_up(origin, sock, conn, context)
    except BaseException:  # failed or cancelled half-way: nothing stays open
        if conn.transport is not None:
            conn.transport.abort()
        sock.close()
        raise


async def _set_up(origin: Origin, sock: socket.socket, conn: Conn,
                  context: Callable[[TLSOptions | None], ssl.SSLContext]) -> Conn:
    loop = asyncio.get_running_loop()
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tls = origin.scheme == "https"
    try:
        ctx = context(origin.tls) if tls else None
    except (OSError, ValueError) as e:
        raise TLSFailure(f"TLS settings for {origin.address} cannot be loaded: "
                         f"{type(e).__name__} {getattr(e, 'strerror', '') or ''}".rstrip(),
                         origin.address) from e
    if origin.proxy is None or not tls:
        await loop.create_connection(lambda: conn, sock=sock, ssl=ctx,
                                     server_hostname=origin.host if tls else None)
        return conn
    await loop.create_connection(lambda: conn, sock=sock)
    await _tunnel(conn, origin)
    assert conn.transport is not None and ctx is not None
    plain = conn.transport
    transport = await loop.start_tls(plain, conn, ctx, server_hostname=origin.host)
    if transport is None:
        raise TLSFailure(f"TLS handshake failed for {origin.address}: closed", origin.address)
    conn.transport = transport  # type: ignore[assignment]
    return conn


async def _tunnel(conn: Conn, origin: Origin) -> None:
    """CONNECT through the proxy; raises ``ProxyFailure`` unless it answers 2xx."""
    proxy = origin.proxy
    assert proxy is not None and conn.transport is not None
    target = origin.address.encode("ascii")
    head = b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n" % (target, target)
    if proxy.authorization is not None:
        head += b"Proxy-Authorization: " + proxy.authorization + b"\r\n"
    conn.parser = ResponseParser(head_only=True)
    conn.transport.write(head + b"\r\n")
    try:
        status = (await conn.read_head(None))[0]
    except TransportFailure as e:
        raise ProxyFailure(f"proxy {proxy.address} broke the tunnel to {origin.address}: "
                           f"{e.message}", origin.address) from e
    conn.parser = None
    if not 200 <= status < 300:
        raise ProxyFailure(f"proxy {proxy.address} answered {status} to CONNECT "
                           f"{origin.address}", origin.address)
