"""The ``opencode-go`` quota source: OpenCode Go's usage windows.

``GET {base_url}/usage`` with ``Authorization: Bearer <key>``. A 200 answers::

    {"usage": {"rolling": {"status": "ok", "percent": 12.5, "resetsAt": "2027-01-01T05:00:00Z"},
               "weekly":  {...}, "monthly": {...}}}

Every window must carry a string ``status``, a numeric ``percent`` within
0-100 and a ``resetsAt`` that is an ISO-8601 time (or null); anything else
makes the whole reading an error, never a partial one. 401 means the key is
unknown to the provider, 403 that it has no subscription. Redirects are not
followed, so the key never leaves the provider's host.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from humpyard.config.spec import ProviderSpec
from humpyard.quota.base import QuotaReading, Window, key_destination_refusal

if TYPE_CHECKING:
    import httpx

MAX_BODY_BYTES = 64 * 1024
MAX_WINDOWS = 8
MAX_STATUS_CHARS = 64
_WINDOW_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}\Z")


class OpencodeGo:
    """Reads ``{base_url}/usage``; see the module docstring for the answer it accepts."""

    name = "opencode-go"

    async def fetch(self, client: httpx.AsyncClient, provider: ProviderSpec,
                    timeout: float) -> QuotaReading:
        import httpx  # not at module import: the request path never needs it

        url = provider.base_url.rstrip("/") + "/usage"
        refusal = key_destination_refusal(url, provider.base_url)
        if refusal is not None:
            return QuotaReading.failed(refusal)
        if not provider.api_key:
            env = provider.api_key_env
            return QuotaReading.failed(
                f"no key: {env} is not set" if env else "no key: the provider has no api_key_env")
        headers = {"Authorization": f"Bearer {provider.api_key}", "Accept": "application/json"}
        try:
            async with asyncio.timeout(timeout):
                status, body = await _get(client, url, headers, timeout)
        except (TimeoutError, httpx.TimeoutException):
            return QuotaReading.failed(f"no answer within {timeout:g}s")
        except httpx.HTTPError as exc:
            detail = str(exc)[:200].replace(provider.api_key, "[redacted]")
            host = httpx.URL(url).netloc.decode("ascii", "replace")
            return QuotaReading.failed(f"request to {host} failed: {type(exc).__name__}"
                                       + (f" ({detail})" if detail else ""))
        if status == 401:
            return QuotaReading.failed("the key is unknown to the provider")
        if status == 403:
            return QuotaReading.failed("the key has no subscription")
        if status != 200:
            return QuotaReading.failed(f"the provider answered HTTP {status}")
        if body is None:
            return QuotaReading.failed(f"the answer is larger than {MAX_BODY_BYTES} bytes")
        return parse_usage(body)


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str],
               timeout: float) -> tuple[int, bytes | None]:
    """The status and body (None when over ``MAX_BODY_BYTES``); the body of a
    non-200 answer is not read."""
    async with client.stream("GET", url, headers=headers, timeout=timeout,
                             follow_redirects=False) as resp:
        if resp.status_code != 200:
            return resp.status_code, b""
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return resp.status_code, None
            chunks.append(chunk)
        return resp.status_code, b"".join(chunks)


def parse_usage(body: bytes) -> QuotaReading:
    """A 200 body → a reading; every way it can be wrong gives an error reading."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return QuotaReading.failed("the answer is not JSON")
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return QuotaReading.failed("the answer has no \"usage\" object")
    if not usage:
        return QuotaReading.failed("the answer has no usage windows")
    if len(usage) > MAX_WINDOWS:
        return QuotaReading.failed(f"the answer has {len(usage)} usage windows (at most "
                                   f"{MAX_WINDOWS} are accepted)")
    windows: dict[str, Window] = {}
    for name, raw in usage.items():
        if not _WINDOW_NAME.match(name):
            return QuotaReading.failed("the answer has a usage window with an unusable name")
        window = _window(name, raw)
        if isinstance(window, str):
            return QuotaReading.failed(window)
        windows[name] = window
    return QuotaReading(windows=windows)


def _window(name: str, raw: Any) -> Window | str:
    """The window, or the reason it is unusable."""
    if not isinstance(raw, dict):
        return f"usage window {name!r} is not an object"
    for key in ("status", "percent", "resetsAt"):
        if key not in raw:
            return f"usage window {name!r} has no {key!r}"
    status, percent, resets = raw["status"], raw["percent"], raw["resetsAt"]
    if not isinstance(status, str) or not status or len(status) > MAX_STATUS_CHARS:
        return f"usage window {name!r} has an unusable status"
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        return f"usage window {name!r} has a non-numeric percent"
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        return f"usage window {name!r} has percent {percent!r}, outside 0-100"
    resets_at: float | None = None
    if resets is not None:
        resets_at = _iso_to_epoch(resets)
        if resets_at is None:
            return f"usage window {name!r} has a resetsAt that is not an ISO-8601 time"
    return Window(percent=float(percent), status=status, resets_at=resets_at)


def _iso_to_epoch(value: Any) -> float | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # a time without an offset is read as UTC
    return when.timestamp()
