"""The limits on answers: their failure classes, their defaults and overrides.

Each limit fails as its own class of the failure tree (``upstream/errors.py``):
the timeouts are ``timeout`` failures (504), the size limits ``connection``
failures (502) like any answer that cannot be used; all count against the
endpoint and none is re-sendable. docs/decisions/0010-limits-on-answers.md.
"""

from __future__ import annotations

import pytest

from humpyard.config import load_config_text
from humpyard.config.spec import AnswerLimits
from humpyard.errors import ConfigError
from humpyard.upstream import errors as E
from humpyard.upstream.classify import FailureClass, classify_failure

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
