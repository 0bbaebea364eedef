import json
import logging
from decimal import Decimal

import pytest

from humpyard.clock import FakeClock
from humpyard.health.book import HealthBook, HealthState, endpoint_key
from humpyard.health.breaker import (
    BreakerState,
    HealthSettings,
    record_failure,
    record_success,
    release_probe,
    try_acquire_probe,
    view,
)

S = HealthSettings()  # threshold 3, cooldown 30, max 300, max_retry_after 300
T0 = 1_800_000_000.0


def fail(state: BreakerState, now: float, n: int = 1, settings: HealthSettings = S,
         retry_after: float | None = None) -> BreakerState:
    for _ in range(n):
        state = record_failure(state, settings, now, retry_after)
    return state


def test_trips_after_threshold() -> None:
    s = fail(BreakerState(), T0, 2)
    assert view(s, S, T0).state == "healthy"
    assert view(s, S, T0).consecutive_failures == 2
    s = fail(s, T0)
    v = view(s, S, T0)
    assert (v.state, v.cold, v.cooldown_remaining_ms) == ("cooling_down", True, 30_000)
    assert v.cooldown_source == "failures"
    assert v.reopens_at == T0 + 30
    assert s.trips == 1


def test_success_resets_a_streak_below_threshold() -> None:
    s = fail(BreakerState(), T0, 2)
    s = record_success(s, S, T0)
    s = fail(s, T0, 2)
    assert view(s, S, T0).state == "healthy"


def probe_and_fail(s: BreakerState, now: float) -> BreakerState:
    won, s = try_acquire_probe(s, S, now)
    assert won
    return fail(s, now)


def test_probe_failure_doubles_up_to_the_cap() -> None:
    s = fail(BreakerState(), T0, 3)
    now = T0
    cooldowns = []
    for _ in range(6):
        now = s.open_until
        assert view(s, S, now).state == "probing"
        s = probe_and_fail(s, now)
        cooldowns.append(s.open_until - now)
    assert cooldowns == [60, 120, 240, 300, 300, 300]


def test_failures_while_cooling_only_count() -> None:
    s = fail(BreakerState(), T0, 3)
    later = fail(s, T0 + 10, 5)
    assert later.open_until == s.open_until
    assert later.trips == 1
    assert view(later, S, T0 + 10).consecutive_failures == 8


def test_single_probe() -> None:
    s = fail(BreakerState(), T0, 3)
    assert try_acquire_probe(s, S, T0 + 29) == (False, s)  # still cooling
    now = T0 + 30
    won_a, s = try_acquire_probe(s, S, now)
    won_b, s2 = try_acquire_probe(s, S, now + 1)
    assert (won_a, won_b) == (True, False)
    assert s2 is s
    v = view(s, S, now + 1)
    assert (v.state, v.cold, v.probe_in_flight) == ("probing", False, True)


def test_probe_lease_expiry_lets_another_win() -> None:
    s = fail(BreakerState(), T0, 3)
    now = T0 + 30
    _, s = try_acquire_probe(s, S, now)
    assert not try_acquire_probe(s, S, now + S.probe_lease_secs - 1)[0]
    won, s = try_acquire_probe(s, S, now + S.probe_lease_secs)
    assert won


def test_release_probe_lets_the_next_request_probe() -> None:
    s = fail(BreakerState(), T0, 3)
    _, s = try_acquire_probe(s, S, T0 + 30)
    s = release_probe(s, S, T0 + 31)
    assert try_acquire_probe(s, S, T0 + 31)[0]
    assert release_probe(BreakerState(), S, T0) == BreakerState()


def test_recovery() -> None:
    s = fail(BreakerState(), T0, 3)
    _, s = try_acquire_probe(s, S, T0 + 30)
    s = record_success(s, S, T0 + 31)
    assert view(s, S, T0 + 31).state == "healthy"
    assert (s.trips, s.consecutive_failures, s.open_until, s.probe_until) == (0, 0, 0, 0)
    # The doubling starts over after a recovery.
    s = fail(s, T0 + 40, 3)
    assert s.open_until - (T0 + 40) == 30


def test_closed_endpoint_needs_no_probe() -> None:
    s = BreakerState()
    assert try_acquire_probe(s, S, T0) == (True, s)


def test_stated_time_is_exact_and_immediate() -> None:
    s = fail(BreakerState(), T0, retry_after=7.66)
    v = view(s, S, T0)
    assert (v.state, v.cooldown_source, v.cooldown_remaining_ms) == (
        "cooling_down", "retry_after", 7660)
    assert (s.trips, s.consecutive_failures) == (0, 0)


@pytest.mark.parametrize(("stated", "honoured"), [(0.2, 1.0), (0.0, 1.0), (10_000, 300.0),
                                                 (299.5, 299.5)])
def test_stated_time_is_clamped(stated: float, honoured: float) -> None:
    s = fail(BreakerState(), T0, retry_after=stated)
    assert s.open_until - T0 == pytest.approx(honoured)


def test_stated_time_is_not_held_to_max_cooldown() -> None:
    settings = HealthSettings(max_cooldown_secs=60, max_retry_after_secs=600)
    s = fail(BreakerState(), T0, retry_after=500, settings=settings)
    assert s.open_until - T0 == 500


def test_stated_time_does_not_escalate_a_later_streak() -> None:
    s = fail(BreakerState(), T0, retry_after=120)
    s = fail(s, T0 + 121, retry_after=120)  # probe answered 429 again, stated again
    assert s.trips == 0
    _, s = try_acquire_probe(s, S, T0 + 241)
    s = record_success(s, S, T0 + 242)
    s = fail(s, T0 + 300, 3)
    assert s.open_until - (T0 + 300) == 30


def test_probe_failure_after_stated_time_reopens_at_base_cooldown() -> None:
    s = fail(BreakerState(), T0, retry_after=10)
    s = probe_and_fail(s, T0 + 10)
    assert s.open_until - (T0 + 10) == 30
    assert s.cooldown_source == "failures"


def test_monotonic_shorter_stated_time_never_shortens() -> None:
    s = fail(BreakerState(), T0, 3)  # 30 s
    same = fail(s, T0 + 1, retry_after=5)
    assert same is s
    longer = fail(s, T0 + 1, retry_after=100)
    assert longer.open_until == T0 + 101
    assert longer.cooldown_source == "retry_after"
    # A trip after a long stated time does not shorten it either.
    s = fail(BreakerState(), T0, retry_after=200)
    s = fail(s, T0 + 1, 3)
    assert s.open_until == T0 + 200


def test_threshold_zero_disables_tracking() -> None:
    off = HealthSettings(failure_threshold=0)
    s = BreakerState()
    assert fail(s, T0, 10, settings=off) is s
    assert fail(s, T0, settings=off, retry_after=60) is s
    assert record_success(s, off, T0) is s
    assert try_acquire_probe(s, off, T0) == (True, s)
    old = fail(BreakerState(), T0, 3)  # a state recorded before tracking was turned off
    assert view(old, off, T0).state == "healthy"
    assert not view(old, off, T0).cold


def test_version_increments_and_noop_returns_same_object() -> None:
    s = BreakerState()
    assert record_success(s, S, T0) is s
    versions = [s.version]
    s = fail(s, T0)
    versions.append(s.version)
    s = fail(s, T0, 2)
    versions.append(s.version)
    _, s = try_acquire_probe(s, S, T0 + 30)
    versions.append(s.version)
    s = record_success(s, S, T0 + 31)
    versions.append(s.version)
    assert versions == [0, 1, 3, 4, 5]
    assert record_success(s, S, T0 + 32) is s


def test_roundtrip_dict() -> None:
    s = fail(BreakerState(), T0, retry_after=9)
    assert BreakerState.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    dynamo = {k: Decimal(str(v)) if isinstance(v, int | float) else v
              for k, v in s.to_dict().items()}
    assert BreakerState.from_dict(dynamo) == s
    assert BreakerState.from_dict({}) == BreakerState()
    with pytest.raises(ValueError):
        BreakerState.from_dict({"cooldown_source": "vibes"})


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        HealthSettings(failure_threshold=-1)
    with pytest.raises(ValueError):
        HealthSettings(cooldown_secs=float("inf"))
    with pytest.raises(ValueError):
        HealthSettings(max_retry_after_secs=0.5)


# The in-memory book.


def extra(record: logging.LogRecord, *names: str) -> tuple:
    return tuple(getattr(record, name) for name in names)


def test_book_is_a_health_state() -> None:
    book: HealthState = HealthBook()
    assert isinstance(book, HealthBook)


def test_book_transitions_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    book = HealthBook(HealthSettings(failure_threshold=2, cooldown_secs=10))
    key = endpoint_key("groq", "llama-3")
    assert key == "groq/llama-3"
    caplog.set_level(logging.INFO, logger="humpyard.health")

    book.record_failure(key, clock.now())
    assert not caplog.records
    book.record_failure(key, clock.now())
    [trip] = caplog.records
    assert trip.getMessage().startswith("endpoint is failing; skipping it for the cooldown")
    assert extra(trip, "endpoint", "cooldown_secs", "cooldown_source") == (key, 10, "failures")
    assert book.snapshot(clock.now())[key].state == "cooling_down"

    clock.advance(10)
    assert book.try_acquire_probe(key, clock.now())
    assert not book.try_acquire_probe(key, clock.now())
    assert book.snapshot(clock.now())[key].probe_in_flight
    caplog.clear()
    book.record_success(key, clock.now())
    [recovered] = caplog.records
    assert recovered.getMessage() == f"endpoint recovered endpoint={key}"
    assert book.view(key, clock.now()).state == "healthy"


def test_book_stated_time_logs_source(caplog: pytest.LogCaptureFixture) -> None:
    book = HealthBook()
    caplog.set_level(logging.INFO, logger="humpyard.health")
    book.record_failure("a/m", T0, retry_after=0.2)
    [line] = caplog.records
    assert extra(line, "cooldown_secs", "cooldown_source") == (1.0, "retry_after")
    caplog.clear()
    book.record_failure("a/m", T0, retry_after=0.5)  # shorter: nothing changes, no log
    assert not caplog.records


def test_book_snapshot_and_unknown_keys() -> None:
    book = HealthBook()
    assert book.get("x/y") == BreakerState()
    assert book.snapshot(T0) == {}
    assert book.try_acquire_probe("x/y", T0)
    assert book.snapshot(T0) == {}  # nothing changed, nothing stored
    book.record_failure("x/y", T0)
    assert book.snapshot(T0)["x/y"].consecutive_failures == 1
    assert book.release_probe("x/y", T0) is book.get("x/y")


def test_book_settings_can_be_replaced_and_state_carries_over() -> None:
    book = HealthBook(HealthSettings(failure_threshold=1))
    book.record_failure("a/m", T0)
    book.settings = HealthSettings(failure_threshold=1, cooldown_secs=5)
    assert book.view("a/m", T0).state == "cooling_down"
