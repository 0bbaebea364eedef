import pytest

from humpyard.errors import NoCapableTarget

from .helpers import NOW, cfg, facts, names, removed, run, snap, target

GENERAL = ("general",)


def config(extra: str = "") -> str:
    return (target("m1", strengths=GENERAL, endpoint="context_window = 32000")
            + target("m2", provider="pub2", strengths=GENERAL, endpoint="context_window = 64000")
            + target("m3", provider="local", strengths=GENERAL, endpoint="context_window = 64000")
            + target("paid-fast", provider="paid", endpoint="context_window = 200000")
            + target("paid-deep", provider="paid", model="deep",
                     endpoint="context_window = 1000000")
            + "[routes.pf]\ntype = \"passthrough\"\npool = { strength = \"general\" }\n"
              "then = { targets = [\"paid-fast\", \"paid-deep\"] }\n" + extra)


def test_tail_follows_the_members_in_written_order_and_is_flagged() -> None:
    p = run(cfg(config()), facts("pf"))
    assert names(p) == ["m1", "m2", "m3", "paid-fast", "paid-deep"]
    assert [t.tail for t in p.targets] == [False, False, False, True, True]
    assert p.tail_on == frozenset({"overflow"})
    assert "unavailable" in p.fallback_on  # pool routes include it by default


def test_members_too_small_are_removed_so_the_tail_serves_directly() -> None:
    c = cfg(config())
    p = run(c, facts("pf", prompt_tokens_low=40000))
    assert names(p) == ["m2", "m3", "paid-fast", "paid-deep"]
    p = run(c, facts("pf", prompt_tokens_low=100000))
    assert names(p) == ["paid-fast", "paid-deep"]
    assert removed(p, "capability") == {t: "context_window_exceeded" for t in ("m1", "m2", "m3")}
    p = run(c, facts("pf", prompt_tokens_low=500000))
    assert names(p) == ["paid-deep"]
    with pytest.raises(NoCapableTarget):
        run(c, facts("pf", prompt_tokens_low=2_000_000))


def test_a_cold_member_is_skipped_for_a_warm_member() -> None:
    p = run(cfg(config()), facts("pf"), snap(cold={"pub/m1": NOW + 5}))
    assert names(p) == ["m2", "m3", "paid-fast", "paid-deep"]


def test_only_cold_members_are_kept_before_the_tail() -> None:
    s = snap(cold={"pub/m1": NOW + 30, "pub2/m2": NOW + 10, "local/m3": NOW + 20})
    p = run(cfg(config()), facts("pf"), s)
    assert names(p) == ["m2", "m3", "m1", "paid-fast", "paid-deep"]
    assert [t.cold for t in p.targets] == [True, True, True, False, False]
    assert removed(p) == {} and p.health_fail_open


def test_cold_tail_targets_are_judged_among_the_tail() -> None:
    c = cfg(config())
    p = run(c, facts("pf"), snap(cold={"paid/paid-fast": NOW + 5}))
    assert names(p) == ["m1", "m2", "m3", "paid-deep"]
    p = run(c, facts("pf"), snap(cold={"paid/paid-fast": NOW + 9, "paid/deep": NOW + 5}))
    assert names(p) == ["m1", "m2", "m3", "paid-deep", "paid-fast"]
    assert not p.health_fail_open  # the members are warm


def test_when_the_tail_serves_directly_it_is_the_group_health_judges() -> None:
    s = snap(cold={"paid/paid-fast": NOW + 9})
    p = run(cfg(config()), facts("pf", prompt_tokens_low=100000), s)
    assert names(p) == ["paid-deep"]
    s = snap(cold={"paid/paid-fast": NOW + 9, "paid/deep": NOW + 5})
    p = run(cfg(config()), facts("pf", prompt_tokens_low=100000), s)
    assert names(p) == ["paid-deep", "paid-fast"] and p.health_fail_open


def test_fastest_pool_orders_members_only() -> None:
    from humpyard.planning.types import LatencyFigure
    text = config().replace('[routes.pf]\ntype = "passthrough"', '[routes.pf]\ntype = "fastest"')
    c = cfg(text)
    lat = {"m1": LatencyFigure(900, 5, NOW), "m2": LatencyFigure(3000, 5, NOW),
           "m3": LatencyFigure(5000, 5, NOW), "paid-fast": LatencyFigure(1, 50, NOW)}
    p = run(c, facts("pf"), snap(latency=lat), explore=False)
    assert names(p) == ["m1", "m2", "m3", "paid-fast", "paid-deep"]
    assert [t for t, _ in p.ranking] == ["m1", "m2", "m3"]
