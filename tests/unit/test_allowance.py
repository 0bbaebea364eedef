"""The allowance of one process: per-key windows on an injected clock, settling once."""

from __future__ import annotations

import pytest

from humpyard.allowance import Allowance, limit_headers
from humpyard.clock import FakeClock
from humpyard.config.spec import KeySpec
from humpyard.errors import RateLimited

START = 1_800_000_000.0  # a whole minute


def key(**limits: int) -> KeySpec:
    return KeySpec(id="k", digest=b"", **limits)  # type: ignore[arg-type]


def test_rpm_is_a_fixed_clock_minute():
    clock, a, k = FakeClock(START + 59), Allowance(), key(rpm_limit=2)
    a.admit(k, 0, clock.now())
    a.admit(k, 0, clock.now())
    with pytest.raises(RateLimited) as e:
        a.admit(k, 0, clock.now())
    assert e.value.limit == "rpm_limit" and e.value.retry_after == 1.0
    clock.advance(1)  # a new minute: the full limit again (the boundary burst is documented)
    a.admit(k, 0, clock.now())
    _, state = a.admit(k, 0, clock.now())
    assert state is not None and state.requests_left == 0


def test_a_refusal_takes_nothing():
    a, k = Allowance(), key(rpm_limit=1, max_parallel_requests=5)
    hold, _ = a.admit(k, 0, START)
    for _ in range(3):
        with pytest.raises(RateLimited):
            a.admit(k, 0, START)
    assert a.state(k, START).in_flight == 1
    a.settle(hold, 0)
    assert a.state(k, START).in_flight == 0


def test_settle_gives_back_exactly_once():
    a, k = Allowance(), key(max_parallel_requests=1, tpm_limit=100)
    hold, _ = a.admit(k, 40, START)
    a.reserve(hold, 0.5)
    assert a.reserved() == {"k": 0.5}
    a.settle(hold, 10)
    a.settle(hold, 10)  # a second settle does nothing
    assert a.reserved() == {}
    s = a.state(k, START)
    assert s.in_flight == 0 and s.tokens_left == 90
    other, _ = a.admit(k, 5, START)
    a.settle(other, None)  # None keeps the estimate
    assert a.state(k, START).tokens_left == 85


def test_tpm_settles_only_into_its_own_minute():
    a, k = Allowance(), key(tpm_limit=100)
    hold, _ = a.admit(k, 30, START + 50)
    a.settle(hold, 500)  # the used tokens replace the estimate
    assert a.state(k, START + 50).tokens_left == 0
    late, _ = a.admit(k, 30, START + 70)
    a.settle(late, 20)
    assert a.state(k, START + 70).tokens_left == 80


def test_a_request_larger_than_tpm_fits_only_an_empty_minute():
    a, k = Allowance(), key(tpm_limit=100)
    a.admit(k, 500, START)
    with pytest.raises(RateLimited) as e:
        a.admit(k, 1, START + 1)
    assert e.value.limit == "tpm_limit"


def test_parallel_waits_one_second():
    a, k = Allowance(), key(max_parallel_requests=1)
    a.admit(k, 0, START)
    with pytest.raises(RateLimited) as e:
        a.admit(k, 0, START)
    assert e.value.limit == "max_parallel_requests" and e.value.retry_after == 1.0


def test_headers_name_only_the_configured_limits():
    a = Allowance()
    _, state = a.admit(key(rpm_limit=10), 0, START + 15)
    assert limit_headers(state, "openai") == {
        "x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "9",
        "x-ratelimit-reset-requests": "45s"}
    _, state = a.admit(key(tpm_limit=1000), 7, START + 15)
    assert limit_headers(state, "anthropic") == {
        "anthropic-ratelimit-tokens-limit": "1000",
        "anthropic-ratelimit-tokens-remaining": "993",
        "anthropic-ratelimit-tokens-reset": "2027-01-15T08:01:00Z"}
    _, state = a.admit(key(max_parallel_requests=3), 0, START)
    assert limit_headers(state, "openai") == {}
    assert limit_headers(None, "openai") == {}


def test_a_remainder_is_null_where_its_limit_is_not_set():
    """Explain's ``limits`` said ``tokens_remaining: 0`` for a key with no ``tpm_limit``,
    which reads as none left."""
    a = Allowance()
    shown = a.state(key(rpm_limit=5), START).to_dict()
    assert shown["requests_remaining"] == 5 and shown["tokens_remaining"] is None
    shown = a.state(key(tpm_limit=100), START).to_dict()
    assert shown["requests_remaining"] is None and shown["tokens_remaining"] == 100
