import random

from humpyard.planning.order import fastest_score, fold_latency, order_fastest
from humpyard.planning.types import LatencyFigure

from .helpers import NOW, cfg, facts, names, route, run, snap, target


def fig(ms: float, samples: int = 5, age: float = 0.0) -> LatencyFigure:
    return LatencyFigure(ms=ms, samples=samples, updated_at=NOW - age)


def config(**fields: object) -> str:
    return (target("a", quality=0.6) + target("b", provider="pub2", quality=0.9)
            + target("c", provider="local") + target("d", provider="paid")
            + route("f", ["a", "b", "c", "d"], type="fastest", **fields))


def order(lat: dict, explore: bool = False, **fields: object) -> list[str]:
    return names(run(cfg(config(**fields)), facts("f"), snap(latency=lat), explore=explore))


def test_fresh_gateway_behaves_like_passthrough() -> None:
    assert order({}) == ["a", "b", "c", "d"]


def test_unmeasured_first_in_written_order_then_by_speed() -> None:
    lat = {"a": fig(500), "c": fig(100)}
    assert order(lat) == ["b", "d", "c", "a"]
    lat = {"a": fig(5000), "b": fig(3000), "c": fig(9000), "d": fig(100)}
    assert order(lat) == ["d", "b", "a", "c"]


def test_a_stale_figure_counts_as_unmeasured() -> None:
    lat = {"a": fig(100, age=601), "b": fig(200), "c": fig(300), "d": fig(400)}
    assert order(lat) == ["a", "b", "c", "d"]
    lat["a"] = fig(100, age=600)
    assert order(lat) == ["a", "b", "c", "d"]  # exactly max_age is still believed
    lat = {"a": fig(900, age=50), "b": fig(200, age=50), "c": fig(300), "d": fig(400)}
    assert order(lat, max_age_secs=30) == ["a", "b", "c", "d"]


def test_fewer_than_min_samples_counts_as_unmeasured() -> None:
    lat = {"a": fig(100, samples=2), "b": fig(200), "c": fig(300), "d": fig(400)}
    assert order(lat) == ["a", "b", "c", "d"]
    assert order(lat, min_samples=2) == ["a", "b", "c", "d"]
    lat["b"] = fig(200, samples=1)
    assert order(lat, min_samples=2) == ["b", "a", "c", "d"]


def test_ties_under_the_latency_target_broken_by_observed_speed() -> None:
    # All four are under 2000 ms: full speed marks for all, so speed decides.
    lat = {"a": fig(1500), "b": fig(700), "c": fig(1900), "d": fig(100)}
    assert order(lat) == ["d", "b", "a", "c"]


def test_quality_blend_the_seeds_worked_example() -> None:
    c = cfg(config(quality_weight=0.5))
    route_ = c.routes["f"]
    slow_strong = fastest_score(route_, fig(20_000), 0.9, NOW)
    quick_weak = fastest_score(route_, fig(800), 0.6, NOW)
    assert abs(slow_strong.score - 0.5) < 1e-9  # type: ignore[operator]
    assert abs(quick_weak.score - 0.8) < 1e-9  # type: ignore[operator]
    lat = {"a": fig(800), "b": fig(20_000), "c": fig(100), "d": fig(100)}
    assert order(lat, quality_weight=0.5).index("a") < order(lat, quality_weight=0.5).index("b")


def test_quality_blend_lets_a_strong_somewhat_slower_model_lead() -> None:
    lat = {"a": fig(800), "b": fig(2500), "c": fig(9000), "d": fig(9000)}
    assert order(lat)[:2] == ["a", "b"]
    # b: 0.5 * 0.8 + 0.5 * 0.9 = 0.85 beats a: 0.5 * 1 + 0.5 * 0.6 = 0.8
    assert order(lat, quality_weight=0.5)[:2] == ["b", "a"]


def test_unknown_quality_is_used_for_targets_without_one() -> None:
    lat = {"c": fig(1000), "a": fig(1000)}  # a declares 0.6, c nothing
    assert order(lat, quality_weight=1.0, unknown_quality=0.7) == ["b", "d", "c", "a"]
    assert order(lat, quality_weight=1.0, unknown_quality=0.1) == ["b", "d", "a", "c"]


def test_exploration_rate_with_a_seeded_rng() -> None:
    c = cfg(config(explore=0.2))
    lat = {"a": fig(100), "b": fig(200), "c": fig(300), "d": fig(400)}
    rng = random.Random(1234)
    n, explored, firsts = 5000, 0, set()
    for _ in range(n):
        p = run(c, facts("f"), snap(latency=lat), rng=rng)
        assert sorted(names(p)) == ["a", "b", "c", "d"]
        if p.ranking[0][1] == "explore":
            explored += 1
            firsts.add(p.ranking[0][0])
            assert names(p)[1:] == [t for t in ["a", "b", "c", "d"] if t != names(p)[0]]
        else:
            assert names(p) == ["a", "b", "c", "d"]
        assert all(r == "fastest" for _, r in p.ranking[1:])
    assert 0.18 < explored / n < 0.22
    assert firsts == {"a", "b", "c", "d"}


def test_explore_zero_and_explain_mode_never_explore() -> None:
    lat = {"a": fig(100), "b": fig(200), "c": fig(300), "d": fig(400)}
    c0 = cfg(config(explore=0))
    c1 = cfg(config(explore=1))
    for seed in range(50):
        assert names(run(c0, facts("f"), snap(latency=lat), rng=random.Random(seed))) == [
            "a", "b", "c", "d"]
        p = run(c1, facts("f"), snap(latency=lat), rng=random.Random(seed), explore=False)
        assert names(p) == ["a", "b", "c", "d"]


def test_seeded_exploration_is_reproducible_across_requests() -> None:
    c = cfg(config(explore=0.5, seed=7))
    lat = {"a": fig(100), "b": fig(200), "c": fig(300), "d": fig(400)}

    def draws() -> list[str]:
        kept: dict[str, random.Random] = {}
        return [names(run(c, facts("f"), snap(latency=lat), rng=random.Random(),
                          route_rngs=kept))[0] for _ in range(40)]
    assert draws() == draws()


def test_ordering_never_adds_a_removed_target() -> None:
    c = cfg(config())
    lat = {"a": fig(100), "b": fig(200), "c": fig(1), "d": fig(1)}
    p = run(c, facts("f"), snap(latency=lat, cold={"paid/d": NOW + 5}), explore=False)
    assert names(p) == ["c", "a", "b"]


def test_order_fastest_direct_and_ranking() -> None:
    c = cfg(config())
    lat = {"a": fig(300), "b": fig(100)}
    got, ranking = order_fastest(c.routes["f"], ["a", "b", "c"], lat, {}, NOW, random.Random(0),
                                 explore=False)
    assert got == ["c", "b", "a"] and ranking == [("c", "fastest"), ("b", "fastest"),
                                                   ("a", "fastest")]


def test_fold_latency_newest_weighs_point_three() -> None:
    f = fold_latency(None, 1000, NOW)
    assert (f.ms, f.samples, f.updated_at) == (1000, 1, NOW)
    f = fold_latency(f, 2000, NOW + 1)
    assert abs(f.ms - 1300) < 1e-9 and f.samples == 2 and f.updated_at == NOW + 1


def test_ranking_memo_follows_time_and_snapshot() -> None:
    c = cfg(config())
    lat = {"a": fig(900), "b": fig(5000, age=500), "c": fig(300), "d": fig(200)}
    s = snap(latency=lat)
    assert names(run(c, facts("f"), s, explore=False)) == ["d", "c", "a", "b"]
    # The same snapshot object later: b's figure has aged out, so b is unmeasured.
    assert names(run(c, facts("f"), s, explore=False, now=NOW + 100)) == ["d", "c", "a", "b"]
    assert names(run(c, facts("f"), s, explore=False, now=NOW + 101)) == ["b", "d", "c", "a"]
    # Back to an earlier time: ranked afresh, not served from the later ranking.
    assert names(run(c, facts("f"), s, explore=False)) == ["d", "c", "a", "b"]
    # A new snapshot is ranked on its own figures.
    s2 = snap(latency={**lat, "a": fig(50)})
    assert names(run(c, facts("f"), s2, explore=False)) == ["a", "d", "c", "b"]
