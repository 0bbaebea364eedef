"""The never-delivered re-send ladder, bounded in wall time (docs/health.md,
"Never-delivered re-sends").

A call that never connected (refused, DNS failure, connect timeout) carried
no request, so dialling the same endpoint again is free. When such a failure
leaves the plan with nothing else to try, the executor re-dials on the
schedule ``redials`` yields, until it ends or a dial connects.

Rung ``i`` is ``min(0.25 * 2**i, 5.0)`` seconds (250 ms doubling to 5 s) and
each sleep is drawn uniformly from the top half of its rung, ``[r/2, r]``
(equal jitter): the random half keeps callers that failed together from
retrying in lockstep, the fixed half keeps every caller backed off.

The window (``connect_retry_window_secs``) bounds wall time from the start
of the dial that failed, dials included: a host that silently drops
connections costs a whole connect timeout per dial, and a window that only
counted the sleeps let a 3 s window take 8 s. Before each re-dial the ladder
reads the clock; it stops when the next sleep would leave no time to dial,
and cuts the dial's connect timeout to what is left. Pure apart from reading
the injected clock: the sleeping and dialling are the caller's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import NamedTuple

FIRST_RUNG_SECS = 0.25
LAST_RUNG_SECS = 5.0


class Redial(NamedTuple):
    """One re-dial: sleep ``sleep`` seconds, then dial with ``connect_timeout``."""

    sleep: float
    connect_timeout: float


def redials(window_secs: float, started: float, monotonic: Callable[[], float],
            rng: random.Random, connect_timeout_secs: float) -> Iterator[Redial]:
    """Yield the re-dials that fit in the window, in order, each when it is due.

    ``started`` is the ``monotonic()`` time the failed dial began; the window
    ends ``window_secs`` later. Each ``Redial`` is computed when it is asked
    for, so the time the caller spent dialling since the previous one counts.
    A re-dial is yielded only if time is left after its sleep, and its connect
    timeout is ``connect_timeout_secs`` cut to that time, so sleeps and dials
    together end by the window's end. Each sleep draws once from ``rng``. A
    window of 0 (or less) yields nothing. Raises ``ValueError`` at once for a
    window that is not finite.
    """
    if not math.isfinite(window_secs):
        raise ValueError("window_secs must be finite")
    return _ladder(started + window_secs, monotonic, rng, connect_timeout_secs)


def _ladder(deadline: float, monotonic: Callable[[], float], rng: random.Random,
            connect_timeout_secs: float) -> Iterator[Redial]:
    rung = FIRST_RUNG_SECS
    while True:
        delay = rng.uniform(rung / 2, rung)
        left = deadline - monotonic() - delay
        if left <= 0:
            return
        yield Redial(delay, min(connect_timeout_secs, left))
        rung = min(rung * 2, LAST_RUNG_SECS)
