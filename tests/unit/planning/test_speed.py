"""A loose guard on planning cost: it runs on every request.

The bound is ten times the design target (50 µs per plan at 100 targets and 50
rules) so that a slow or busy machine does not fail it; what it catches is an
accidental per-request parse or a quadratic step.
"""

import random
import timeit

from humpyard.planning.types import EndpointHealth, LatencyFigure, Override, StateSnapshot

from .helpers import NOW, cfg, facts, run


def big_config(n_targets: int, n_rules: int, rtype: str):  # type: ignore[no-untyped-def]
    parts = []
    for i in range(n_targets):
        parts.append(f'[targets.t{i}]\nclass = "{"public" if i % 2 else "paid"}"\n'
                     f'endpoints = [{{ provider = "pub", model = "m{i}", context_window = 100000,'
                     f' tools = true }}, {{ provider = "pub2", model = "m{i}" }}]\n')
    listed = ", ".join(f'"t{i}"' for i in range(n_targets))
    parts.append(f'[routes.big]\ntype = "{rtype}"\ntargets = [{listed}]\n')
    for i in range(n_rules):
        parts.append(f'[[select]]\nwhen = {{ model = "big", profile = "p{i}" }}\n'
                     'route = "big"\n')
    return cfg("".join(parts))


def per_plan_us(n: int, rtype: str) -> float:
    c = big_config(n, n // 2, rtype)
    health = {f"pub/m{i}": EndpointHealth() for i in range(n)}
    health.update({f"pub2/m{i}": EndpointHealth(state="cooling_down", cold=True,
                                                 reopens_at=NOW + 5) for i in range(n)})
    lat = {f"t{i}": LatencyFigure(ms=100 + (i * 37) % 900, samples=5, updated_at=NOW)
           for i in range(n)}
    s = StateSnapshot(health=health, latency=lat,
                      overrides=(Override(id="1", kind="disable_target", subject="t3"),))
    f = facts("big", headers={"x-humpyard-profile": "none"}, tools=True, prompt_tokens=5000,
              prompt_tokens_low=2500)
    rng = random.Random(1)
    run(c, f, s, rng=rng)
    return min(timeit.repeat(lambda: run(c, f, s, rng=rng), number=100, repeat=3)) / 100 * 1e6


def test_planning_cost_is_small_and_grows_about_linearly() -> None:
    for rtype in ("passthrough", "random", "fastest"):
        at_100 = per_plan_us(100, rtype)
        assert at_100 < 500, f"{rtype}: {at_100:.0f} µs per plan at 100 targets"
        assert per_plan_us(400, rtype) < 12 * at_100
