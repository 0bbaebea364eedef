"""The route algorithms that order targets: passthrough, random and fastest.

Each takes the targets that survived planning (in the order written in the
configuration) and returns them reordered; none adds or drops a target. The
random source is always passed in: a route with a ``seed`` is given the same
``random.Random(seed)`` on every request (the caller keeps it), which makes
its draws reproducible.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat

from humpyard.config.spec import RouteSpec
from humpyard.planning.types import LatencyFigure

SMOOTHING = 0.3
"""Weight of the newest sample in a target's latency figure."""

FASTEST = "fastest"
EXPLORE = "explore"


def fold_latency(prev: LatencyFigure | None, sample_ms: float, now: float) -> LatencyFigure:
    """A figure with one more answered attempt folded in (the newest weighs 0.3).

    Only answered attempts should be folded: a failure says nothing about speed.
    """
    if prev is None:
        return LatencyFigure(ms=float(sample_ms), samples=1, updated_at=now)
    ms = (1 - SMOOTHING) * prev.ms + SMOOTHING * sample_ms
    return LatencyFigure(ms=ms, samples=prev.samples + 1, updated_at=now)


@dataclass(frozen=True, slots=True)
class WeightTable:
    """A random route's weights, cumulated once so a pick costs O(log n).

    ``pick`` draws among the targets not in ``gone`` with probability
    proportional to their weights (re-aligned to what remains): it draws
    over the full table and redraws when it lands on a removed target, and
    after a few misses draws once over the remaining targets directly.
    """

    names: tuple[str, ...]
    weights: tuple[float, ...]
    cumulative: tuple[float, ...]

    @classmethod
    def build(cls, targets: Sequence[str], weights: Mapping[str, float]) -> WeightTable:
        ws = tuple(max(0.0, weights.get(t, 1.0)) for t in targets)
        return cls(tuple(targets), ws, tuple(accumulate(ws)))

    def pick(self, rng: random.Random, gone: Container[str] = ()) -> str | None:
        if not self.names or self.cumulative[-1] <= 0:
            return None
        total = self.cumulative[-1]
        for _ in range(_REDRAWS):
            i = bisect_right(self.cumulative, rng.random() * total)
            if i < len(self.names) and self.names[i] not in gone:
                return self.names[i]
        left = [(t, w) for t, w in zip(self.names, self.weights, strict=True)
                if w > 0 and t not in gone]
        if not left:
            return None
        point = rng.random() * sum(w for _, w in left)
        for t, w in left:
            point -= w
            if point < 0:
                return t
        return left[-1][0]


_REDRAWS = 8


def order_random(targets: Sequence[str], weights: Mapping[str, float] | WeightTable,
                 rng: random.Random, gone: Container[str] = ()) -> list[str]:
    """A weighted pick first, then the rest in written order.

    ``targets`` are the remaining targets in written order; ``weights`` the
    route's (a mapping, a target without a weight counting 1, or the route's
    prebuilt ``WeightTable``, with ``gone`` the removed targets). Weights are
    re-aligned to the remaining targets: a removed target's weight is gone and
    the others keep their proportions. A zero-weight target is never picked
    first but stays as a fallback; with nothing pickable the order is written.
    """
    table = weights if isinstance(weights, WeightTable) else WeightTable.build(targets, weights)
    order = list(targets)
    pick = table.pick(rng, gone) if len(order) > 1 else None
    if pick is not None and order[0] != pick:
        order.remove(pick)
        order.insert(0, pick)
    return order


@dataclass(frozen=True, slots=True)
class FastestScore:
    """How a fastest route sees one target right now."""

    measured: bool
    latency_ms: float | None
    samples: int
    quality: float
    speed: float | None
    score: float | None


def fastest_score(route: RouteSpec, figure: LatencyFigure | None, quality: float | None,
                  now: float) -> FastestScore:
    """One target's figure as the route judges it (unmeasured: no speed, no score).

    A figure with fewer than ``min_samples`` answers, or older than
    ``max_age_secs``, counts as unmeasured.
    """
    q = route.unknown_quality if quality is None else quality
    if figure is None:
        return FastestScore(False, None, 0, q, None, None)
    if figure.samples < route.min_samples or now - figure.updated_at > route.max_age_secs:
        return FastestScore(False, figure.ms, figure.samples, q, None, None)
    speed = 1.0 if figure.ms <= 0 else min(1.0, route.latency_target_ms / figure.ms)
    w = route.quality_weight
    return FastestScore(True, figure.ms, figure.samples, q, speed, (1 - w) * speed + w * q)


@dataclass(frozen=True, slots=True)
class FastestRanking:
    """A fastest route's targets ranked at one moment, before exploration.

    ``unmeasured`` in written order, then ``measured`` best first. Ranking a
    subset gives the same relative order, so one ranking of a route's full
    list serves every request (filter it by what planning left) for as long
    as ``valid_at(now)``: no measured figure has aged out and time has not
    gone backwards.
    """

    unmeasured: tuple[str, ...]
    measured: tuple[str, ...]
    ranked_at: float
    valid_until: float

    def valid_at(self, now: float) -> bool:
        return self.ranked_at <= now <= self.valid_until

    def order(self, drop: Collection[str] = ()) -> list[str]:
        """The ranked order without the targets in ``drop``."""
        if not drop:
            return [*self.unmeasured, *self.measured]
        return ([t for t in self.unmeasured if t not in drop]
                + [t for t in self.measured if t not in drop])


def rank_fastest(route: RouteSpec, targets: Sequence[str],
                 latency: Mapping[str, LatencyFigure], quality: Mapping[str, float | None],
                 now: float) -> FastestRanking:
    """Rank targets by the fastest-route rules (see ``order_fastest``), without exploring.

    The same arithmetic as ``fastest_score``, inlined: it runs per snapshot.
    """
    unmeasured: list[str] = []
    measured: list[tuple[float, float, int, str]] = []
    valid_until = math.inf
    w, target_ms, unknown = route.quality_weight, route.latency_target_ms, route.unknown_quality
    min_samples, max_age = route.min_samples, route.max_age_secs
    for i, t in enumerate(targets):
        f = latency.get(t)
        if f is None or f.samples < min_samples or now - f.updated_at > max_age:
            unmeasured.append(t)
            continue
        ms = f.ms
        score = 1.0 if ms <= 0 else min(1.0, target_ms / ms)
        if w:
            q = quality.get(t)
            score = (1 - w) * score + w * (unknown if q is None else q)
        measured.append((-score, ms, i, t))
        valid_until = min(valid_until, f.updated_at + max_age)
    measured.sort()
    return FastestRanking(tuple(unmeasured), tuple(m[3] for m in measured), now, valid_until)


def explore_first(order: list[str], route: RouteSpec, rng: random.Random,
                  explore: bool = True) -> list[tuple[str, str]]:
    """Maybe move one uniformly chosen target to the front (in place); the ranking.

    With probability ``route.explore`` (and ``explore`` true, and more than
    one target) the first entry is ranked ``explore``; all others ``fastest``.
    """
    reason = FASTEST
    if explore and route.explore > 0 and len(order) > 1 and rng.random() < route.explore:
        pick = rng.choice(order)
        order.remove(pick)
        order.insert(0, pick)
        reason = EXPLORE
    if not order:
        return []
    return [(order[0], reason), *zip(order[1:], repeat(FASTEST))]


def order_fastest(route: RouteSpec, targets: Sequence[str],
                  latency: Mapping[str, LatencyFigure], quality: Mapping[str, float | None],
                  now: float, rng: random.Random, *,
                  explore: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
    """Order a fastest route's targets; returns (order, ranking).

    Unmeasured targets come first, in written order, so they get measured
    (a figure with fewer than ``min_samples`` answers or older than
    ``max_age_secs`` counts as unmeasured). Measured ones follow by
    descending score ``(1 - w) * speed + w * quality``, ties by observed time
    (faster first), then written order. With probability ``route.explore``
    (and ``explore`` true) one eligible target, chosen uniformly, is moved to
    the front and ranked ``explore``; every other entry is ranked ``fastest``.
    """
    order = rank_fastest(route, targets, latency, quality, now).order()
    return order, explore_first(order, route, rng, explore)
