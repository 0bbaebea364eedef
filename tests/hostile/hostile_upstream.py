"""A hostile OpenAI-compatible upstream, run as a child process for attack soaks.

``python -m tests.hostile.hostile_upstream PORT`` serves on 127.0.0.1:PORT and
answers each chat request by the ``model`` it names:

``good``     a small completion (streamed when asked), as a healthy provider would
``bomb``     200 ``content-encoding: gzip``: 1 MB that inflates to 1 GiB
``bomb500``  the same bomb on a 500
``flood``    200 with ``content-length`` of 1 GiB, written as fast as the peer reads
``endless``  200 ``text/event-stream`` whose first line never ends
``stall``    the request read, then nothing until the peer goes away
``trickle``  a streamed answer's first content, then nothing

Only the standard library: the process must not share the gateway's code, and
its cost is its own (it runs outside the gateway's process and the test's).
"""

from __future__ import annotations

import asyncio
import json
import sys
import zlib

GIB = 1 << 30
CHUNK = 1 << 20


def gzip_bomb(size: int = GIB) -> bytes:
    """``size`` zero bytes gzip-compressed (about 1 MB for 1 GiB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(CHUNK)
    parts = [c.compress(zeros) for _ in range(size // CHUNK)]
    parts.append(c.flush())
    return b"".join(parts)


BOMB = b""


def completion(model: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-h", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "pong"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }).encode()


def chunk(model: str, delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 1,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_request(reader: asyncio.StreamReader) -> dict | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in raw.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    try:
        body = await reader.readexactly(length)
        return json.loads(body) if body else {}
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        return None


async def answer(req: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Answer one request; True when the connection may carry another."""
    model = str(req.get("model", "good"))
    if model == "good":
        if req.get("stream"):
            writer.write(head(200, {"content-type": "text/event-stream",
                                    "transfer-encoding": "chunked"}))
            for part in (chunk(model, {"role": "assistant", "content": "po"}),
                         chunk(model, {"content": "ng"}, "stop"), b"data: [DONE]\n\n"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            writer.write(b"0\r\n\r\n")
        else:
            body = completion(model)
            writer.write(head(200, {"content-type": "application/json",
                                    "content-length": str(len(body))}) + body)
        await writer.drain()
        return True
    if model in ("bomb", "bomb500"):
        writer.write(head(200 if model == "bomb" else 500,
                          {"content-type": "application/json", "content-encoding": "gzip",
                           "content-length": str(len(BOMB))}))
        for i in range(0, len(BOMB), 64 * 1024):
            writer.write(BOMB[i:i + 64 * 1024])
            await writer.drain()
        return True
    if model == "flood":
        writer.write(head(200, {"content-type": "application/json",
                                "content-length": str(GIB)}))
        zeros = b" " * (256 * 1024)
        for _ in range(GIB // len(zeros)):
            writer.write(zeros)
            await writer.drain()
        return False
    if model == "endless":
        writer.write(head(200, {"content-type": "text/event-stream"}) + b"data: ")
        xs = b"x" * (64 * 1024)
        while True:
            writer.write(xs)
            await writer.drain()
            await asyncio.sleep(0.001)
    if model == "trickle":
        writer.write(head(200, {"content-type": "text/event-stream"}))
        writer.write(chunk(model, {"role": "assistant", "content": "first "}))
        await writer.drain()
    # stall, trickle: nothing more until the peer goes away
    await reader.read()
    return False


async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while (req := await read_request(reader)) is not None:
            if not await answer(req, reader, writer):
                break
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    global BOMB
    BOMB = gzip_bomb()
    server = await asyncio.start_server(serve_one, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
