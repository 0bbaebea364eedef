"""A fake Amazon Bedrock runtime on a real loopback socket, for tests.

``FakeBedrock`` speaks the four operations humpyard calls —
``/model/{id}/invoke``, ``/invoke-with-response-stream``, ``/converse``,
``/converse-stream`` — plus ``/count-tokens``, and checks every request's
SigV4 signature the way AWS does: it RECOMPUTES it with botocore's signer
from the request as received (method, path, the signed headers, the body) and
the credentials it was given, and refuses a missing, stale or wrong one with
403 ``InvalidSignatureException``. Each request consumes the next scripted
reply (``reply``, ``fail``, ``stream_fail``); with none left, ``default``.

Streams are ``application/vnd.amazon.eventstream`` frames built here
(``frame``; ``tests/unit/test_bedrock_frames.py`` checks them against
botocore's decoder): InvokeModelWithResponseStream sends ``chunk`` events whose
``bytes`` are base64 Anthropic events; ConverseStream its own events.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import datetime
import hmac
import json
import re
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.listener import Listener

ACCESS_KEY = "AKIAFAKEBEDROCK00001"
SECRET_KEY = "fake-secret-key-never-logged-0123456789abcd"
SESSION_TOKEN = "fake-session-token-never-logged-ZYXWVU9876"
EVENTSTREAM = "application/vnd.amazon.eventstream"
_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
_PATH = re.compile(r"^/model/([^/]+)/(invoke|invoke-with-response-stream|converse|"
                   r"converse-stream|count-tokens)$")


# -- event-stream frames --------------------------------------------------------------


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths, CRC), string headers, payload, CRC."""
    head = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        head += struct.pack("B", len(raw_name)) + raw_name + b"\x07" \
            + struct.pack(">H", len(raw_value)) + raw_value
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack(">I", binascii.crc32(message))


def event_frame(event_type: str, body: Mapping[str, Any]) -> bytes:
    return frame({":event-type": event_type, ":content-type": "application/json",
                  ":message-type": "event"}, json.dumps(body).encode())


def chunk_frame(anthropic_event: Mapping[str, Any]) -> bytes:
    inner = json.dumps(anthropic_event).encode()
    return event_frame("chunk", {"bytes": base64.b64encode(inner).decode(), "p": "abcd"})


def exception_frame(exception_type: str, message: str) -> bytes:
    return frame({":exception-type": exception_type, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())


# -- scripted replies ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """An answer: text and/or a tool call, its usage (Anthropic names)."""

    text: str = "hello from bedrock"
    tool: tuple[str, dict[str, Any]] | None = None  # (name, input)
    usage: Mapping[str, int] = field(default_factory=lambda: {
        "input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0})
    tool_id: str = "toolu_bedrock_1"


@dataclass(frozen=True)
class Fail:
    """An error answer with Bedrock's type in ``x-amzn-ErrorType``."""

    status: int
    type: str
    message: str = "failed"


@dataclass(frozen=True)
class StreamFail:
    """A stream whose first frame (before any content) is an exception."""

    type: str = "throttlingException"
    message: str = "Too many requests, please wait before trying again."


@dataclass(frozen=True)
class BreakAfterContent:
    """A stream that sends its first text delta, then an exception frame."""

    type: str = "modelStreamErrorException"
    message: str = "the model stopped"


Step = Reply | Fail | StreamFail | BreakAfterContent
Behaviour = Callable[["Received"], Step]
"""A default that looks at the request (an agent's turn: ``agent_turn``)."""


def agent_turn(tool: str, arguments: dict[str, Any]) -> Behaviour:
    """An agent's model: with ``tool`` offered and no tool result in the last user
    turn, call it; after a tool result, answer quoting it; else answer plainly."""

    def turn(got: Received) -> Step:
        body = got.json if isinstance(got.json, dict) else {}
        messages = body.get("messages") or []
        last = messages[-1].get("content") if messages else None
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(last, list) else []
        if results:
            content = results[-1].get("content")
            text = content if isinstance(content, str) else " ".join(
                b.get("text", "") for b in content or [] if isinstance(b, dict))
            return Reply(f"The tool said: {text}")
        if any(isinstance(t, dict) and t.get("name") == tool for t in body.get("tools") or []):
            return Reply("", tool=(tool, arguments))
        return Reply("plain answer")

    return turn


def reply(text: str = "hello from bedrock", **kw: Any) -> Reply:
    return Reply(text, **kw)


def fail(status: int, type: str, message: str = "failed") -> Fail:
    return Fail(status, type, message)


class Received(NamedTuple):
    """One request as received: the path as sent (encoded), the model id decoded,
    the operation, lower-case headers, the raw body and its JSON."""

    path: str
    model: str
    operation: str
    headers: dict[str, str]
    body: bytes
    json: Any
    signature_ok: bool


# -- the server ---------------------------------------------------------------------------


class FakeBedrock:
    """See the module docstring. ``url`` is the ``base_url`` to configure."""

    def __init__(self, *, region: str = "us-east-1", access_key: str = ACCESS_KEY,
                 secret_key: str = SECRET_KEY, token: str | None = SESSION_TOKEN,
                 default: Step | Behaviour | None = None, count: int = 42):
        self.region = region
        self.credentials = Credentials(access_key, secret_key, token)
        self.default: Step | Behaviour = default or Reply()
        self.count = count
        self._queue: collections.deque[Step] = collections.deque()
        self._received: list[Received] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self.port = 0

    def __enter__(self) -> FakeBedrock:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._started.wait(5), "FakeBedrock did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *steps: Step) -> None:
        with self._lock:
            self._queue.extend(steps)

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        listener = Listener(self._serve, "127.0.0.1", 0, limit=1 << 22)
        self.port = listener.start().port
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            await listener.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                await self._answer(writer, method, target, headers, body)
        except (ConnectionError, asyncio.CancelledError):
            return

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> bool:
        """Recompute the request's SigV4 signature with botocore; True when it matches."""
        m = _AUTH.match(headers.get("authorization", ""))
        creds = self.credentials
        if m is None or m.group(1) != creds.access_key or m.group(3) != self.region \
                or m.group(4) != "bedrock":
            return False
        stamp = headers.get("x-amz-date", "")
        try:
            when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(
                tzinfo=datetime.UTC)
        except ValueError:
            return False
        if abs((datetime.datetime.now(datetime.UTC) - when).total_seconds()) > 300 \
                or m.group(2) != stamp[:8]:
            return False
        signed = m.group(5).split(";")
        if "host" not in signed or (creds.token and "x-amz-security-token" not in signed):
            return False
        if creds.token and headers.get("x-amz-security-token") != creds.token:
            return False
        request = AWSRequest(method=method, url=f"http://{headers.get('host')}{path}",
                             data=body, headers={h: headers.get(h, "") for h in signed})
        request.context["timestamp"] = stamp
        auth = SigV4Auth(creds, "bedrock", self.region)
        canonical = auth.canonical_request(request)
        expected = auth.signature(auth.string_to_sign(request, canonical), request)
        return hmac.compare_digest(expected, m.group(6))

    async def _answer(self, writer: asyncio.StreamWriter, method: str, target: str,
                      headers: dict[str, str], body: bytes) -> None:
        ok = self.verify(method, target, headers, body)
        match = _PATH.match(target.split("?", 1)[0])
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        model = unquote(match.group(1)) if match else ""
        operation = match.group(2) if match else ""
        with self._lock:
            self._received.append(Received(target, model, operation, headers, body, parsed, ok))
            step = self._queue.popleft() if self._queue and ok and match \
                and operation != "count-tokens" else self.default
        if callable(step):
            step = step(self._received[-1])
        if not ok:
            return await _send_error(writer, Fail(403, "InvalidSignatureException",
                                                  "The request signature we calculated does "
                                                  "not match the signature you provided."))
        if match is None or method != "POST":
            return await _send_error(writer, Fail(404, "UnknownOperationException", "no"))
        if operation == "count-tokens":
            return await _send_json(writer, {"inputTokens": self.count})
        if isinstance(step, Fail):
            return await _send_error(writer, step)
        stream = operation.endswith("stream")
        if isinstance(step, BreakAfterContent):
            events = _events(Reply("partial answer"), model)[:3]
            return await _send_frames(writer, [*(chunk_frame(e) for e in events),
                                               exception_frame(step.type, step.message)])
        if isinstance(step, StreamFail):
            if not stream:
                return await _send_error(writer, Fail(429, "ThrottlingException", step.message))
            return await _send_frames(writer, [exception_frame(step.type, step.message)])
        if operation == "invoke":
            return await _send_json(writer, _message(step, model))
        if operation == "invoke-with-response-stream":
            return await _send_frames(writer, [chunk_frame(e) for e in _events(step, model)])
        if operation == "converse":
            return await _send_json(writer, _converse(step))
        return await _send_frames(writer, _converse_frames(step))


async def _send(writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes,
                extra: Mapping[str, str] | None = None) -> None:
    lines = [f"HTTP/1.1 {status} X", f"content-type: {ctype}",
             f"content-length: {len(body)}", "x-amzn-requestid: fake-request-id",
             *(f"{k}: {v}" for k, v in (extra or {}).items())]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()


async def _send_json(writer: asyncio.StreamWriter, doc: Any) -> None:
    await _send(writer, 200, "application/json", json.dumps(doc).encode())


async def _send_error(writer: asyncio.StreamWriter, f: Fail) -> None:
    await _send(writer, f.status, "application/json",
                json.dumps({"message": f.message}).encode(),
                {"x-amzn-ErrorType": f"{f.type}:http://internal.amazon.com/coral/com.amazon."
                                     "bedrock/"})


async def _send_frames(writer: asyncio.StreamWriter, frames: Sequence[bytes]) -> None:
    """Chunked, one frame per chunk, the first split in two (a frame across reads)."""
    head = ("HTTP/1.1 200 OK\r\ncontent-type: " + EVENTSTREAM
            + "\r\ntransfer-encoding: chunked\r\n\r\n").encode()
    writer.write(head)
    pieces: list[bytes] = []
    for i, f in enumerate(frames):
        pieces += [f[:7], f[7:]] if i == 0 else [f]
    for piece in pieces:
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _blocks(step: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
    if step.tool:
        blocks.append({"type": "tool_use", "id": step.tool_id, "name": step.tool[0],
                       "input": step.tool[1]})
    return blocks


def _message(step: Reply, model: str) -> dict[str, Any]:
    return {"id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": model,
            "content": _blocks(step), "stop_reason": "tool_use" if step.tool else "end_turn",
            "stop_sequence": None, "usage": dict(step.usage)}


def _events(step: Reply, model: str) -> list[dict[str, Any]]:
    usage = dict(step.usage)
    start = {**_message(step, model), "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(_blocks(step)):
        if block["type"] == "text":
            out.append({"type": "content_block_start", "index": i,
                        "content_block": {"type": "text", "text": ""}})
            words = block["text"].split(" ")
            for j, word in enumerate(words):
                out.append({"type": "content_block_delta", "index": i, "delta": {
                    "type": "text_delta", "text": word + (" " if j < len(words) - 1 else "")}})
        else:
            out.append({"type": "content_block_start", "index": i, "content_block": {
                **block, "input": {}}})
            out.append({"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        out.append({"type": "content_block_stop", "index": i})
    out.append({"type": "message_delta", "delta": {
        "stop_reason": "tool_use" if step.tool else "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": usage.get("output_tokens", 0)}})
    out.append({"type": "message_stop", "amazon-bedrock-invocationMetrics": {
        "inputTokenCount": usage.get("input_tokens", 0),
        "outputTokenCount": usage.get("output_tokens", 0)}})
    return out


def _converse_usage(step: Reply) -> dict[str, int]:
    u = step.usage
    return {"inputTokens": u.get("input_tokens", 0), "outputTokens": u.get("output_tokens", 0),
            "totalTokens": u.get("input_tokens", 0) + u.get("output_tokens", 0),
            "cacheReadInputTokens": u.get("cache_read_input_tokens", 0),
            "cacheWriteInputTokens": u.get("cache_creation_input_tokens", 0)}


def _converse(step: Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"text": step.text}] if step.text else []
    if step.tool:
        content.append({"toolUse": {"toolUseId": step.tool_id, "name": step.tool[0],
                                    "input": step.tool[1]}})
    return {"output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if step.tool else "end_turn",
            "usage": _converse_usage(step), "metrics": {"latencyMs": 12}}


def _converse_frames(step: Reply) -> list[bytes]:
    out = [event_frame("messageStart", {"role": "assistant"})]
    index = 0
    if step.text:
        for word in step.text.split(" "):
            out.append(event_frame("contentBlockDelta", {"contentBlockIndex": 0,
                                                         "delta": {"text": word + " "}}))
        out.append(event_frame("contentBlockStop", {"contentBlockIndex": 0}))
        index = 1
    if step.tool:
        out.append(event_frame("contentBlockStart", {"contentBlockIndex": index, "start": {
            "toolUse": {"toolUseId": step.tool_id, "name": step.tool[0]}}}))
        out.append(event_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {
            "toolUse": {"input": json.dumps(step.tool[1])}}}))
        out.append(event_frame("contentBlockStop", {"contentBlockIndex": index}))
    out.append(event_frame("messageStop", {"stopReason": "tool_use" if step.tool
                                           else "end_turn"}))
    out.append(event_frame("metadata", {"usage": _converse_usage(step),
                                        "metrics": {"latencyMs": 12}}))
    return out
