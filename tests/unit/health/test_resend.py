import itertools
import random

import pytest

from humpyard.upstream.resend import ladder_delays

RUNGS = [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


@pytest.mark.parametrize("window", [0, -1, 0.1])
def test_window_too_small_yields_nothing(window: float) -> None:
    assert list(ladder_delays(window, random.Random(1))) == []


@pytest.mark.parametrize("seed", range(20))
def test_each_sleep_is_in_the_top_half_of_its_rung(seed: int) -> None:
    delays = list(ladder_delays(90, random.Random(seed)))
    assert len(delays) > len(RUNGS)
    rungs = itertools.chain(RUNGS, itertools.repeat(5.0))
    for delay, rung in zip(delays, rungs, strict=False):
        assert rung / 2 <= delay <= rung


@pytest.mark.parametrize("window", [0.2, 1, 3.3, 10, 90])
@pytest.mark.parametrize("seed", range(10))
def test_total_never_exceeds_window_and_stops_at_first_overshoot(window: float,
                                                                 seed: int) -> None:
    delays = list(ladder_delays(window, random.Random(seed)))
    assert sum(delays) <= window
    # The next draw from the same sequence is the one that would have overshot.
    rng = random.Random(seed)
    for rung, delay in zip(RUNGS + [5.0] * 100, delays, strict=False):
        assert rng.uniform(rung / 2, rung) == delay
    next_rung = (RUNGS + [5.0] * 100)[len(delays)]
    assert sum(delays) + rng.uniform(next_rung / 2, next_rung) > window


def test_seeded_sequence_is_reproducible() -> None:
    a = list(ladder_delays(30, random.Random(7)))
    b = list(ladder_delays(30, random.Random(7)))
    assert a == b
    assert a != list(ladder_delays(30, random.Random(8)))


def test_is_lazy_and_rejects_infinite_window() -> None:
    with pytest.raises(ValueError):
        ladder_delays(float("inf"), random.Random(0))
    gen = ladder_delays(1e9, random.Random(0))
    assert len(list(itertools.islice(gen, 1000))) == 1000
