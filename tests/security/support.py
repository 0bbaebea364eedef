"""Helpers for the security tests: known secrets, leak sweeps, echoing upstreams.

Every secret here is long, distinctive and appears nowhere in the code, so a
plain substring search over everything the gateway wrote finds any copy of
it. ``forbidden_forms`` adds the SHA-256 hex of each (a key given as
``key_sha256`` is a secret of the file too).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from humpyard.clock import SystemClock
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store import open_store
from tests.support.gateway import Running, config_from
from tests.support.servers import ServerThread
from tests.support.steps import Exchange, Step

PROVIDER_KEY = "sk-prov-MAIN-7f3a9c1e5b2d4f6a8c0e"
DOWN_KEY = "sk-prov-DOWN-1a2b3c4d5e6f7a8b9c0d"
SLOW_KEY = "sk-prov-SLOW-9e8d7c6b5a4f3e2d1c0b"
BOOM_KEY = "sk-prov-BOOM-0f1e2d3c4b5a69788796"
QUOTA_KEY = "sk-prov-QUOTA-5c4b3a29180f7e6d5c4b"
ALPHA_KEY = "hk-client-ALPHA-2b4d6f8a0c1e3a5c7e9b"  # key_env, manage_overrides, admin
BETA_KEY = "hk-client-BETA-8a6c4e2a0b9d7f5b3d1f"  # given as key_sha256
WRONG_KEY = "hk-client-WRONG-3e1c9a7b5d3f1e9c7a5b"  # presented, never configured

PROVIDER_KEYS = (PROVIDER_KEY, DOWN_KEY, SLOW_KEY, BOOM_KEY, QUOTA_KEY)
CLIENT_KEYS = (ALPHA_KEY, BETA_KEY, WRONG_KEY)
ALL_SECRETS = PROVIDER_KEYS + CLIENT_KEYS

MSG = [{"role": "user", "content": "hi"}]


def sha256_hex(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def forbidden_forms(secrets: Iterable[str] = ALL_SECRETS) -> list[str]:
    """Each secret and its SHA-256 hex (lower and upper case)."""
    out: list[str] = []
    for s in secrets:
        out += [s, sha256_hex(s), sha256_hex(s).upper()]
    return out


def find_leaks(text: str | bytes, secrets: Iterable[str] = ALL_SECRETS) -> list[str]:
    """The forbidden forms present in ``text`` (bytes are searched as UTF-8)."""
    if isinstance(text, bytes):
        return [f for f in forbidden_forms(secrets) if f.encode() in text]
    return [f for f in forbidden_forms(secrets) if f in text]


def describe(resp: httpx.Response) -> str:
    """A response as one searchable text: status line, every header, the body."""
    head = "\n".join(f"{k}: {v}" for k, v in resp.headers.multi_items())
    return f"{resp.request.method} {resp.request.url} -> {resp.status_code}\n{head}\n\n{resp.text}"


class EchoAuth(Step):
    """An upstream that quotes the request's Authorization header back in its
    error: as JSON (``{"error": {"message": ...}}``), as plain text, or as an
    error event of a stream that has or has not started."""

    def __init__(self, code: int = 401, *, form: str = "json", pad: int = 0):
        self.code, self.form, self.pad = code, form, pad

    async def respond(self, ex: Exchange) -> bool:
        auth = ex.request.headers.get("authorization", "")
        text = "x" * self.pad + f"Incorrect API key provided: {auth}. Check your key."
        if self.form == "text":
            await ex.send(self.code, text.encode(), "text/plain")
            return True
        error = {"error": {"message": text, "type": "invalid_request_error", "code": None}}
        if self.form == "json":
            await ex.send(self.code, json.dumps(error).encode(), "application/json")
            return True
        await ex.start_stream()
        chunks = ex.chunks()
        await ex.event(chunks.role())
        if self.form == "stream_after_content":
            await ex.event(chunks.content("partial "))
        if self.form == "stream_bad_event":
            await ex.send_chunk(f"data: not json {auth}\n\n".encode())
        else:
            await ex.event(error)
        await ex.end_stream()
        return True


class EchoAuthHeader(Step):
    """A 200 answer that also puts the Authorization header (or ``value``) in
    response headers of its own."""

    def __init__(self, value: str | None = None):
        self.value = value

    async def respond(self, ex: Exchange) -> bool:
        auth = self.value or ex.request.headers.get("authorization", "")
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": ex.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        await ex.send(200, json.dumps(body).encode(), "application/json",
                      {"x-debug-authorization": auth, "set-cookie": f"session={auth}"})
        return True


class ExplodingTransport(httpx.AsyncBaseTransport):
    """The real transport, except that a call under ``/boom`` raises a plain bug
    (not an ``httpx`` error), whose message shows the request as httpx prints it."""

    def __init__(self) -> None:
        self._real = httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/boom"):
            raise RuntimeError(f"bug while sending {request!r} with {request.headers!r}")
        return await self._real.handle_async_request(request)

    async def aclose(self) -> None:
        await self._real.aclose()


@contextmanager
def serving(text: str, env: Mapping[str, str], *, ledger: str = ":memory:",
            transport: httpx.AsyncBaseTransport | None = None) -> Iterator[Running]:
    """Like ``running_gateway``, with the upstream transport as a seam."""
    config = config_from(text, env)
    store = open_store(ledger, SystemClock())
    gw = Gateway(config, store, transport=transport, rng=random.Random(1))
    app = create_app(config, gateway=gw)
    with ServerThread(app, lifespan="on") as srv:
        yield Running(url=srv.url, gw=gw, config=config)


def client(base_url: str, **headers: str) -> httpx.Client:
    """A client that opens a connection per request. (``ServerThread``'s sockets
    lack TCP_NODELAY, so a reused connection waits ~40 ms for a delayed ACK.)"""
    return httpx.Client(base_url=base_url, headers=headers, timeout=10,
                        limits=httpx.Limits(max_keepalive_connections=0))


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": MSG, **extra}
