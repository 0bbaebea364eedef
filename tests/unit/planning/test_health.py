from .helpers import NOW, cfg, facts, names, removed, route, run, snap, target


def config(skip: bool = True) -> str:
    return ((f"[health]\nskip_cold_targets = {'true' if skip else 'false'}\n")
            + target("a") + target("b", provider="pub2")
            + "[targets.c]\nendpoints = [{ provider = \"paid\", model = \"c1\" },"
              " { provider = \"local\", model = \"c2\" }]\n"
            + route("r", ["a", "b", "c"]) + route("solo", ["a"]))


def test_a_cold_target_is_skipped_when_another_remains() -> None:
    p = run(cfg(config()), facts(), snap(cold={"pub/a": NOW + 30}))
    assert names(p) == ["b", "c"]
    assert [(r.target, r.step, r.reason) for r in p.removals] == [("a", "health", "cold")]
    assert not p.health_fail_open


def test_a_target_is_cold_only_when_every_endpoint_is() -> None:
    c = cfg(config())
    assert names(run(c, facts(), snap(cold={"paid/c1": NOW + 30}))) == ["a", "b", "c"]
    p = run(c, facts(), snap(cold={"paid/c1": NOW + 30, "local/c2": NOW + 5}))
    assert names(p) == ["a", "b"]


def test_every_target_cold_fails_open_soonest_to_reopen_first() -> None:
    s = snap(cold={"pub/a": NOW + 30, "pub2/b": NOW + 10, "paid/c1": NOW + 20,
                   "local/c2": NOW + 40})
    p = run(cfg(config()), facts(), s)
    assert p.health_fail_open
    assert names(p) == ["b", "c", "a"]  # c reopens when its first endpoint does (20)
    assert all(t.cold for t in p.targets)
    assert removed(p) == {}


def test_the_only_target_cold_is_still_tried() -> None:
    p = run(cfg(config()), facts("solo"), snap(cold={"pub/a": NOW + 30}))
    assert names(p) == ["a"] and p.health_fail_open and p.targets[0].cold


def test_probing_counts_as_warm() -> None:
    p = run(cfg(config()), facts(), snap(cold={"pub2/b": NOW + 5}, probing=("pub/a",)))
    assert names(p) == ["a", "c"]
    assert not p.targets[0].cold


def test_skip_cold_targets_false_keeps_written_order() -> None:
    p = run(cfg(config(skip=False)), facts(), snap(cold={"pub/a": NOW + 30}))
    assert names(p) == ["a", "b", "c"]
    assert p.targets[0].cold and not p.health_fail_open and p.removals == ()


def test_health_runs_after_strict_classes_and_never_widens() -> None:
    c = cfg(target("p", cls="private", provider="local") + target("q", cls="public")
            + route("r", ["p", "q"], allowed_classes=["private"]))
    p = run(c, facts(), snap(cold={"local/p": NOW + 5}))
    assert names(p) == ["p"] and p.health_fail_open


def tiered() -> str:
    return (target("e1") + target("e2", provider="pub2") + target("c1", provider="paid")
            + target("j", provider="local")
            + "[routes.lc]\ntype = \"llm_classifier\"\nefficient = [\"e1\", \"e2\"]\n"
              "capable = [\"c1\"]\njudge = \"j\"\n")


def test_a_tier_emptied_by_health_is_served_by_the_other() -> None:
    p = run(cfg(tiered()), facts("lc"), snap(cold={"paid/c1": NOW + 5}))
    assert p.tiers["capable"] == ("e1", "e2")
    assert removed(p, "health") == {"c1": "cold"}


def test_a_cold_judge_falls_back_and_a_warm_judge_alone_does_not_count() -> None:
    p = run(cfg(tiered()), facts("lc"), snap(cold={"local/j": NOW + 5}))
    assert p.tiers["judge"] == ("e1", "e2")
    s = snap(cold={"pub/e1": NOW + 9, "pub2/e2": NOW + 3, "paid/c1": NOW + 5})
    p = run(cfg(tiered()), facts("lc"), s)
    assert p.health_fail_open and removed(p) == {}
    assert p.tiers["efficient"] == ("e2", "e1") and p.tiers["judge"] == ("j",)
