"""The re-send ladder's arithmetic on a fake clock: rungs, jitter, and the window."""

import itertools
import random

import pytest

from humpyard.clock import FakeClock
from humpyard.upstream.resend import Redial, redials

RUNGS = [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
CONNECT = 10.0


def instant(window: float, seed: int, clock: FakeClock | None = None) -> list[Redial]:
    """The re-dials when every dial fails at once (a refused connection)."""
    clock = clock or FakeClock()
    out = []
    for r in redials(window, clock.monotonic(), clock.monotonic, random.Random(seed), CONNECT):
        clock.advance(r.sleep)
        out.append(r)
    return out


@pytest.mark.parametrize("window", [0, -1, 0.1])
def test_window_too_small_yields_nothing(window: float) -> None:
    assert instant(window, 1) == []


@pytest.mark.parametrize("seed", range(20))
def test_each_sleep_is_in_the_top_half_of_its_rung(seed: int) -> None:
    delays = [r.sleep for r in instant(90, seed)]
    assert len(delays) > len(RUNGS)
    rungs = itertools.chain(RUNGS, itertools.repeat(5.0))
    for delay, rung in zip(delays, rungs, strict=False):
        assert rung / 2 <= delay <= rung


@pytest.mark.parametrize("window", [0.2, 1, 3.3, 10, 90])
@pytest.mark.parametrize("seed", range(10))
def test_instant_dials_sleep_until_the_next_sleep_would_overshoot(window: float,
                                                                  seed: int) -> None:
    delays = [r.sleep for r in instant(window, seed)]
    assert sum(delays) < window
    rng = random.Random(seed)
    for rung, delay in zip(RUNGS + [5.0] * 100, delays, strict=False):
        assert rng.uniform(rung / 2, rung) == delay
    next_rung = (RUNGS + [5.0] * 100)[len(delays)]
    assert sum(delays) + rng.uniform(next_rung / 2, next_rung) >= window


@pytest.mark.parametrize("connect", [0.3, 1.0, 2.5, 10.0])
@pytest.mark.parametrize("window", [1, 3, 10])
@pytest.mark.parametrize("seed", range(10))
def test_dials_that_hang_count_and_the_window_bounds_the_wall_time(
        connect: float, window: float, seed: int) -> None:
    """A host that drops SYNs: every dial waits its whole connect timeout."""
    clock = FakeClock()
    first = clock.monotonic()
    clock.advance(connect)  # the dial that failed and started the ladder
    schedule = redials(window, first, clock.monotonic, random.Random(seed), connect)
    dials = []
    for r in schedule:
        clock.advance(r.sleep)
        assert 0 < r.connect_timeout <= connect
        clock.advance(r.connect_timeout)  # the dial hangs until its timeout
        dials.append(r)
    assert clock.monotonic() - first <= max(window, connect) + 1e-9
    if dials and dials[-1].connect_timeout < connect:
        # the last dial was cut exactly to the end of the window
        assert clock.monotonic() - first == pytest.approx(window)


def test_three_second_window_with_one_second_dials() -> None:
    """The issue's case: 3 s of window must not become 7.8 s of waiting."""
    clock = FakeClock()
    first = clock.monotonic()
    clock.advance(1.0)
    for r in redials(3, first, clock.monotonic, random.Random(4), 1.0):
        clock.advance(r.sleep + r.connect_timeout)
    assert 2.0 < clock.monotonic() - first <= 3.0


def test_the_clock_is_read_when_each_redial_is_asked_for() -> None:
    clock = FakeClock()
    schedule = redials(20, clock.monotonic(), clock.monotonic, random.Random(0), CONNECT)
    r = next(schedule)
    assert r.connect_timeout == CONNECT  # nearly 20 s left after a short sleep: not cut
    clock.advance(19.0)  # 19 s spent since the first dial: the next one gets what is left
    r2 = next(schedule)
    assert r2.connect_timeout == pytest.approx(1.0 - r2.sleep)
    clock.advance(1.0)
    assert list(schedule) == []


def test_seeded_sequence_is_reproducible() -> None:
    a = instant(30, 7)
    assert a == instant(30, 7)
    assert a != instant(30, 8)


def test_rejects_an_infinite_window_at_once() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError):
        redials(float("inf"), 0.0, clock.monotonic, random.Random(0), CONNECT)
