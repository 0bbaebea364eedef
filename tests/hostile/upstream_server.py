"""A hostile upstream for attack tests: answers generated on the fly, chosen by path.

``HostileUpstream(answers)`` listens on loopback in a process of its own (forked,
so a test's probe, timed in the test's process, never waits for the GIL while
the attacker writes a gigabyte). A provider whose
``base_url`` is ``{url}/<kind>/v1`` gets, for every request, the bytes of the
generator registered as ``<kind>`` (``answers``): an iterable of ``bytes`` (each
written, then drained, so a 1 GiB answer never sits in memory), a ``float``
(seconds of silence) and ``HOLD`` (keep the connection open, silent, until the
server stops). ``hits[kind]``
counts the requests each kind received. Nothing here parses beyond the request
line and ``Content-Length``: the point is to send exactly what a broken or
malicious provider would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx

from tests.support.listener import ListenerThread

HOLD = object()
Answer = Callable[[], Iterable[object]]


class Hits:
    """Requests received per kind, counted in the server's process, read in the test's."""

    def __init__(self, kinds: list[str]):
        self._index = {k: i for i, k in enumerate(kinds)}
        self._counts: Any = multiprocessing.get_context("fork").Array("i", len(kinds))

    def __getitem__(self, kind: str) -> int:
        return int(self._counts[self._index[kind]])

    def add(self, kind: str) -> None:
        with self._counts.get_lock():
            self._counts[self._index[kind]] += 1


class HostileUpstream:
    def __init__(self, answers: dict[str, Answer]):
        self.answers = answers
        self.hits = Hits(list(answers))
        self.port = 0

    def url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self.port}/{kind}/v1"

    def __enter__(self) -> HostileUpstream:
        ctx = multiprocessing.get_context("fork")
        reader, writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=self._run, args=(writer,), daemon=True,
                                 name="HostileUpstream")
        self._proc.start()
        if not reader.poll(10):
            self._proc.kill()
            raise RuntimeError("the hostile upstream did not start")
        self.port = reader.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.kill()
        self._proc.join(10)

    def _run(self, ready: Any) -> None:
        server = ListenerThread(self._serve, name="HostileUpstream").__enter__()
        ready.send(server.port)
        multiprocessing.Event().wait()  # until killed

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                kind = head.split(b" ", 2)[1].decode().split("/")[1]
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                await reader.readexactly(length)
                self.hits.add(kind)
                for part in self.answers[kind]():
                    if part is HOLD:
                        await asyncio.Event().wait()
                    if isinstance(part, float):
                        await asyncio.sleep(part)
                        continue
                    assert isinstance(part, bytes)
                    writer.write(part)
                    await writer.drain()
                return  # one answer per connection: every answer here ends with a close
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.transport.abort()


def head(status: int, content_type: str, *extra: str, length: int | None = None) -> bytes:
    """A response head; without ``length`` the body is delimited by the close."""
    lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}", "connection: close",
             *extra]
    if length is not None:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@cache
def gzip_bomb(total: int, unit: bytes = bytes(1 << 20)) -> bytes:
    """A valid gzip body that inflates to ``total`` bytes of ``unit`` repeated (``total``
    a multiple of its length): one deflate segment ending in a full flush repeats
    byte for byte, so a 1 GiB bomb (about 1 MB) takes a second to build, not a minute
    of compressing."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = c.compress(unit) + c.flush(zlib.Z_FULL_FLUSH)
    n = total // len(unit)
    crc = 0
    for _ in range(n):
        crc = zlib.crc32(unit, crc)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + segment * n + c.flush()
            + struct.pack("<II", crc, (n * len(unit)) & 0xFFFFFFFF))


def pieces(data: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def repeated(piece: bytes, total: int) -> Iterator[bytes]:
    """``piece`` again and again, ``total`` bytes in all (never held at once)."""
    sent = 0
    while sent < total:
        yield piece
        sent += len(piece)


def hostile_config(tmp: Path, hostile: HostileUpstream, good: str, kinds: Iterable[str], *,
                   top: str = "", provider_extra: Callable[[str], str] = lambda kind: "") -> Path:
    """A ``serve`` config: route ``ok`` → the good upstream, and for each hostile
    ``kind`` a route ``kind`` → its provider (``hostile.url(kind)``) then ``good``;
    breakers off, a ledger in ``tmp``. ``top`` and ``provider_extra(kind)`` add keys."""
    parts = [f"""{top}
[ledger]
path = "{tmp / 'ledger.db'}"
[health]
failure_threshold = 0
[providers.good]
base_url = "{good}"
[targets.good]
endpoints = [{{ provider = "good", model = "g" }}]
[routes.ok]
targets = ["good"]
"""]
    for kind in kinds:
        parts.append(f"""
[providers.{kind}]
base_url = "{hostile.url(kind)}"
{provider_extra(kind)}
[targets.{kind}]
endpoints = [{{ provider = "{kind}", model = "m" }}]
[routes.{kind}]
targets = ["{kind}", "good"]
""")
    path = tmp / "humpyard.toml"
    path.write_text("".join(parts))
    return path


def wait_decision(http: httpx.Client, request_id: str, timeout: float = 10) -> dict[str, Any]:
    """The decision of ``request_id`` once recorded (the gateway records after answering)."""
    deadline = time.monotonic() + timeout
    while (r := http.get(f"/v1/decisions/{request_id}")).status_code == 404:
        assert time.monotonic() < deadline, "the decision was never recorded"
        time.sleep(0.02)
    return r.json()  # type: ignore[no-any-return]
