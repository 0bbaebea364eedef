import json
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from humpyard.health.retry_after import parse_retry_after

NOW = 1_800_000_000.0


def body(status: int, text: str | bytes | dict, headers: dict | None = None) -> float | None:
    if isinstance(text, dict | list):
        text = json.dumps(text)
    if isinstance(text, str):
        text = text.encode()
    return parse_retry_after(status, headers or {}, text, NOW)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("Rate limit reached. Please try again in 7.66s. Visit ...", 7.66),
        ("Please try again in 20ms.", 0.02),
        ("try again in 1m30s", 90.0),
        ("Please retry after 12 seconds.", 12.0),
        ("Retry in 2 minutes", 120.0),
        ("TRY AGAIN IN 1h2m3s", 3723.0),
        ("please try again in 1 minute and 5 seconds", 65.0),
        ("try again in 0s", 0.0),
    ],
)
def test_phrasings(text: str, seconds: float) -> None:
    assert body(429, text) == pytest.approx(seconds)
    assert body(429, {"error": {"message": text, "type": "rate_limit"}}) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "doc",
    [
        {"error": {"code": 429, "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"},
        ]}},
        {"error": {"retryDelay": "7s"}},
        {"retryDelay": "7s"},
        {"retry_after": 7},
        {"retry_after": "7"},
        {"retry_after": 7.0},
        {"retry_after": "7s"},
        {"error": {"retry_after": 7}},
        {"retry_after_ms": 7000},
        {"error": {"retry_after_ms": "7000"}},
        [{"error": {"details": [{"retryDelay": "7.000s"}]}}],
    ],
)
def test_fields(doc) -> None:
    assert body(429, doc) == pytest.approx(7.0)


def test_fields_beat_phrasing() -> None:
    doc = {"error": {"message": "try again in 30s", "retry_after": 5}}
    assert body(429, doc) == 5.0


def test_truncated_json_still_reads_fields() -> None:
    text = '{"error": {"retryDelay": "9s", "message": "' + "x" * 5000
    assert body(503, text) == 9.0


def test_only_first_four_kib() -> None:
    text = "x" * 4096 + " try again in 5s"
    assert body(429, text) is None


def test_header_seconds() -> None:
    assert body(429, "", {"Retry-After": "120"}) == 120.0
    assert body(503, "", {"retry-after": " 3 "}) == 3.0


def test_header_http_date() -> None:
    when = datetime.fromtimestamp(NOW + 90, tz=UTC)
    assert body(429, "", {"Retry-After": format_datetime(when, usegmt=True)}) == 90.0


def test_header_http_date_in_the_past_is_zero() -> None:
    when = datetime.fromtimestamp(NOW - 90, tz=UTC)
    assert body(429, "", {"Retry-After": format_datetime(when, usegmt=True)}) == 0.0


def test_header_ms() -> None:
    assert body(429, "", {"retry-after-ms": "1500", "retry-after": "9"}) == 1.5


def test_header_precedence_over_body() -> None:
    assert body(429, "Please try again in 7.66s", {"Retry-After": "2"}) == 2.0
    assert body(429, {"retry_after": 30}, {"Retry-After": "2"}) == 2.0


def test_unreadable_header_falls_back_to_body() -> None:
    assert body(429, "try again in 4s", {"Retry-After": "soon"}) == 4.0


def test_httpx_headers_work() -> None:
    headers = httpx.Headers({"Retry-After": "11"})
    assert parse_retry_after(429, headers, b"", NOW) == 11.0


@pytest.mark.parametrize("status", [400, 408, 413, 500, 502, 504])
def test_other_statuses_ignored(status: int) -> None:
    assert body(status, "try again in 5s", {"Retry-After": "5"}) is None


@pytest.mark.parametrize(
    ("text", "headers"),
    [
        ("", {}),
        ("rate limited", {}),
        ("try again later", {}),
        ("try again in a while", {}),
        ("try again in 5 moments", {}),
        (b"\xff\xfe\x00\x01", {}),
        ({"retry_after": -5}, {}),
        ({"retry_after": "soon"}, {}),
        ({"retry_after": None}, {}),
        ({"retry_after": True}, {}),
        ({"retry_after": 10**400}, {}),
        ({"retryDelay": "1e999s"}, {}),
        ("[" * 5000, {}),
        ("", {"Retry-After": "Someday, 99 Foo 2100"}),
        ("", {"Retry-After": "-3"}),
        ("", {"Retry-After": "inf"}),
        ("", {"Retry-After": "nan"}),
    ],
)
def test_garbage(text, headers) -> None:
    assert body(429, text, headers) is None


def test_not_clamped_here() -> None:
    assert body(429, {"retry_after": 100000}) == 100000.0
    assert body(429, "try again in 200ms") == pytest.approx(0.2)
