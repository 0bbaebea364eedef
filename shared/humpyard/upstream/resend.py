"""The never-delivered re-send ladder (seed 004).

A call that never connected (refused, DNS failure, connect timeout) carried
no request, so dialling the same endpoint again is free. When such a failure
leaves the plan with nothing else to try, the executor re-dials after each
sleep this module yields, until the ladder ends or a dial connects.

Rung ``i`` is ``min(0.25 * 2**i, 5.0)`` seconds (250 ms doubling to 5 s) and
each sleep is drawn uniformly from the top half of its rung, ``[r/2, r]``
(equal jitter): the random half keeps callers that failed together from
retrying in lockstep, the fixed half keeps every caller backed off. Pure:
the sleeping is the caller's, through its clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

FIRST_RUNG_SECS = 0.25
LAST_RUNG_SECS = 5.0


def ladder_delays(window_secs: float, rng: random.Random) -> Iterator[float]:
    """Yield the sleeps before each re-dial, in order.

    Stops before the first sleep that would take the total past
    ``window_secs``, so the sleeps always sum to at most the window; a window
    of 0 (or less) yields nothing. Each sleep draws once from ``rng``.
    Raises ``ValueError`` at once for a window that is not finite.
    """
    if not math.isfinite(window_secs):
        raise ValueError("window_secs must be finite")
    return _ladder(window_secs, rng)


def _ladder(window_secs: float, rng: random.Random) -> Iterator[float]:
    spent = 0.0
    rung = FIRST_RUNG_SECS
    while True:
        delay = rng.uniform(rung / 2, rung)
        if spent + delay > window_secs:
            return
        spent += delay
        yield delay
        rung = min(rung * 2, LAST_RUNG_SECS)
