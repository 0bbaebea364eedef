"""Hundreds of keep-alive connections of chat traffic, fast enough to load the gateway.

httpx's connection pool costs time per request that grows with its size (at
256 connections one process drives ~50 requests/s through it), so a load
test at that concurrency uses this instead: raw asyncio streams, pre-encoded
requests, and a reader for exactly what ``humpyard serve`` answers
(``content-length`` or ``chunked`` bodies). Wire behaviour is tested with
httpx elsewhere; this only needs each answer's status, request id and body.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


def chat_request(port: int, model: str, stream: bool, text: str) -> bytes:
    body = json.dumps({"model": model, "stream": stream,
                       "messages": [{"role": "user", "content": text}]}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-cased names), body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, headers, bytes(body)
            body += (await reader.readexactly(size + 2))[:-2]
    return status, headers, await reader.readexactly(int(headers.get("content-length", 0)))


@dataclass
class ChatLoad:
    """``connections`` clients sending chat requests back to back (every third one
    streamed) until ``stop`` is set or the server goes away.

    ``received`` holds ``(time.monotonic(), request id)`` of every complete 200
    answer (a stream only once its ``[DONE]`` arrived); ``errors`` counts other
    statuses.
    """

    port: int
    connections: int
    model: str = "t"
    received: list[tuple[float, str]] = field(default_factory=list)
    errors: int = 0
    stop: bool = False
    # what each error was: "status 503", or "stream without [DONE]" (the assertion's report)
    error_kinds: collections.Counter[str] = field(default_factory=collections.Counter)

    async def _client(self, i: int) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return
        n = 0
        try:
            while not self.stop:
                n += 1
                stream = (n + i) % 3 == 0
                writer.write(chat_request(self.port, self.model, stream, f"hello {i}-{n}"))
                status, headers, body = await read_answer(reader)
                if status == 200 and (not stream or b"[DONE]" in body):
                    self.received.append((time.monotonic(), headers["x-humpyard-request-id"]))
                else:
                    self.errors += 1
                    self.error_kinds[f"status {status}" if status != 200
                                     else f"stream without [DONE]: {body[-200:]!r}"] += 1
        except (OSError, asyncio.IncompleteReadError):
            return  # the server is gone
        finally:
            writer.close()

    async def run(self, until: Callable[[ChatLoad], Awaitable[None]]) -> None:
        """Drive the load until ``until(self)`` returns, then let every client finish."""
        clients = [asyncio.create_task(self._client(i)) for i in range(self.connections)]
        try:
            await until(self)
        finally:
            self.stop = True
            await asyncio.wait_for(asyncio.gather(*clients), 60)
