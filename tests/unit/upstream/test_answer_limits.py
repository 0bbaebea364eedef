"""The limits on answers: their failure classes, their defaults and overrides.

Each limit fails as its own class of the failure tree (``upstream/errors.py``):
the timeouts are ``timeout`` failures (504), the size limits ``connection``
failures (502) like any answer that cannot be used; all count against the
endpoint and none is re-sendable. docs/decisions/0010-limits-on-answers.md.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import time

import pytest

from humpyard.config import load_config_text
from humpyard.config.spec import AnswerLimits, ProviderSpec
from humpyard.errors import ConfigError
from humpyard.upstream import errors as E
from humpyard.upstream.classify import FailureClass, classify_failure
from humpyard.upstream.client import UpstreamClient
from tests.support.rawserver import HOLD, RawServer

BASE = """
[providers.a]
base_url = "http://127.0.0.1:9/v1"
{a}
[providers.b]
base_url = "http://127.0.0.1:9/v1"
[targets.t]
endpoints = [{{ provider = "a", model = "m" }}, {{ provider = "b", model = "m" }}]
{top}
"""


@pytest.mark.parametrize(("cls", "failure_class", "status"), [
    (E.FirstByteTimeout, FailureClass.TIMEOUT, 504),
    (E.IdleTimeout, FailureClass.TIMEOUT, 504),
    (E.BodyTooLarge, FailureClass.CONNECTION, 502),
    (E.DecompressionBomb, FailureClass.CONNECTION, 502),
    (E.EventTooLarge, FailureClass.CONNECTION, 502),
])
def test_each_limit_is_a_class_of_its_own(cls: type[E.TransportFailure],
                                          failure_class: FailureClass, status: int) -> None:
    assert cls in E.failure_classes()
    got = classify_failure(cls("x 10.0.0.1:443", "10.0.0.1:443"))
    assert got.failure_class == failure_class and got.counts_for_health
    assert not got.never_delivered and cls.status == status
    assert issubclass(cls, E.ReadTimeout | E.AnswerTooLarge)


def test_the_defaults_protect_a_file_that_says_nothing() -> None:
    config = load_config_text(BASE.format(a="", top=""))
    want = AnswerLimits(max_response_bytes=32 << 20, max_decompression_ratio=250,
                        max_sse_event_bytes=4 << 20, first_byte_timeout_secs=120,
                        idle_timeout_secs=300)
    assert config.router.limits == want
    assert config.providers["a"].limits == config.providers["b"].limits == want


def test_router_keys_are_defaults_and_a_provider_overrides_them() -> None:
    config = load_config_text(BASE.format(
        a="max_response_bytes = 4096\nfirst_byte_timeout_secs = 5",
        top="[router]\nmax_response_bytes = 8192\nidle_timeout_secs = 30"))
    a, b = config.providers["a"].limits, config.providers["b"].limits
    assert (a.max_response_bytes, a.first_byte_timeout_secs, a.idle_timeout_secs) == \
        (4096, 5, 30)
    assert (b.max_response_bytes, b.first_byte_timeout_secs, b.idle_timeout_secs) == \
        (8192, 120, 30)


@pytest.mark.parametrize(("where", "line"), [
    ("a", "max_response_bytes = 10"),
    ("a", "max_decompression_ratio = 1"),
    ("top", "[router]\nmax_sse_event_bytes = 0"),
    ("top", "[router]\nidle_timeout_secs = 0"),
])
def test_a_bad_value_names_the_field(where: str, line: str) -> None:
    text = BASE.format(a=line if where == "a" else "", top=line if where == "top" else "")
    with pytest.raises(ConfigError) as info:
        load_config_text(text)
    name = line.split("\n")[-1].split(" =")[0]
    assert name in str(info.value)


def _fetch(script: list[object], *, max_bytes: int, stream: bool = False,
           limits: AnswerLimits | None = None) -> tuple[object, float]:
    """Open one call to a ``RawServer`` playing ``script`` and read its body with
    ``max_bytes``; what came back (the body, or the failure) and the seconds it took."""
    async def main() -> tuple[object, float]:
        client = UpstreamClient()
        try:
            with RawServer(script) as up:  # type: ignore[arg-type]
                p = ProviderSpec(name="p", base_url=up.url + "/v1", timeout_secs=5,
                                 limits=limits or AnswerLimits())
                resp = await client.open(p, "/chat/completions", b"{}", stream=stream)
                started = time.monotonic()
                try:
                    got: object = await resp.read(max_bytes=max_bytes)
                except E.TransportFailure as e:
                    got = e
                finally:
                    await resp.aclose()
                return got, time.monotonic() - started
        finally:
            await client.aclose()
    return asyncio.run(main())


def test_a_declared_length_over_the_cap_fails_before_reading() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 99999999\r\n\r\n"
    got, took = _fetch([head, HOLD], max_bytes=1 << 20)
    assert isinstance(got, E.BodyTooLarge) and took < 1
    assert "max_response_bytes=1048576" in got.message and "127.0.0.1:" in got.message


def test_a_bomb_stops_at_the_ratio_and_a_normal_gzip_answer_passes() -> None:
    bomb = gzip.compress(bytes(64 << 20), 9)
    head = (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
            % len(bomb))
    got, _ = _fetch([head + bomb], max_bytes=32 << 20)
    assert isinstance(got, E.DecompressionBomb), got
    assert "max_decompression_ratio=250" in got.message

    rng = random.Random(3)  # text of a small vocabulary: compresses well, as answers do
    words = "the a of to and in is it that for on with as was at by an be this".split()
    text = " ".join(rng.choice(words) for _ in range(300_000))
    plain = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
    body = gzip.compress(plain)
    head = (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
            % len(body))
    got, _ = _fetch([head + body], max_bytes=32 << 20)
    assert got == plain


def test_a_gzip_answer_of_several_members_is_decoded_whole() -> None:
    """RFC 1952: a gzip body is a series of members. httpx decodes the first and drops
    the rest (docs/upstream.md, "Content codings"); urllib3 and the gzip module decode
    them all, and so does the gateway now."""
    plain = json.dumps({"choices": [{"message": {"content": "zipped " * 2000}}]}).encode()
    body = b"".join(gzip.compress(plain[i:i + 1000]) for i in range(0, len(plain), 1000))
    head = (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
            % len(body))
    got, _ = _fetch([head + body], max_bytes=32 << 20)
    assert got == plain == gzip.decompress(body)


def test_an_inflated_body_over_the_cap_is_too_large() -> None:
    plain = b"[" + b"1," * (3 << 20) + b"1]"  # ~6 MiB, inflating ~100x: under the ratio
    body = gzip.compress(plain)
    head = (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
            % len(body))
    got, _ = _fetch([head + body], max_bytes=1 << 20,
                    limits=AnswerLimits(max_decompression_ratio=100_000))
    assert isinstance(got, E.BodyTooLarge), got
