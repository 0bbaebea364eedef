import pytest

from humpyard.errors import OverrideNoTarget
from humpyard.planning.types import Override

from .helpers import NOW, cfg, facts, names, route, run, snap, target


def config() -> str:
    return (target("a")
            + "[targets.b]\nendpoints = [{ provider = \"pub\", model = \"b1\" },"
              " { provider = \"paid\", model = \"b2\" }]\n"
            + target("c", provider="paid") + target("p", cls="private", provider="local")
            + target("q", cls="public")
            + route("r", ["a", "b", "c"]) + route("solo", ["a"])
            + route("strict", ["p", "q"], allowed_classes=["private"]))


def ov(kind: str, subject: str, target_: str | None = None, oid: str = "1", **kw) -> Override:
    return Override(id=oid, kind=kind, subject=subject, target=target_, **kw)


def test_disable_target_removes_it_with_the_override_id() -> None:
    p = run(cfg(config()), facts(), snap(overrides=(ov("disable_target", "b", oid="9"),)))
    assert names(p) == ["a", "c"]
    assert [(r.target, r.step, r.reason, r.override_id) for r in p.removals] == [
        ("b", "override", "disable_target", "9")]


def test_drain_provider_removes_endpoints_and_targets_left_with_none() -> None:
    p = run(cfg(config()), facts(), snap(overrides=(ov("drain_provider", "paid"),)))
    assert names(p) == ["a", "b"]
    assert [e.provider for e in p.targets[1].endpoints] == ["pub"]
    assert [(r.target, r.reason) for r in p.removals] == [("c", "drain_provider")]


def test_pin_route_keeps_only_pinned_targets_several_pins_keep_each() -> None:
    c = cfg(config())
    p = run(c, facts(), snap(overrides=(ov("pin_route", "r", "c"),)))
    assert names(p) == ["c"]
    p = run(c, facts(), snap(overrides=(ov("pin_route", "r", "c", oid="1"),
                                        ov("pin_route", "r", "a", oid="2"))))
    assert names(p) == ["a", "c"]
    assert {r.target: r.override_id for r in p.removals} == {"b": "1"}


def test_pin_on_another_route_does_nothing_here() -> None:
    p = run(cfg(config()), facts(), snap(overrides=(ov("pin_route", "solo", "a"),)))
    assert names(p) == ["a", "b", "c"]


def test_stale_and_expired_overrides_do_nothing() -> None:
    c = cfg(config())
    stale = (ov("disable_target", "a", stale=True), ov("disable_target", "gone"),
             ov("drain_provider", "nowhere"), ov("pin_route", "r", "not-listed"),
             ov("pin_route", "no-route", "a"), ov("disable_target", "b", expires_at=NOW - 1))
    p = run(c, facts(), snap(overrides=stale))
    assert names(p) == ["a", "b", "c"] and p.removals == ()
    live = ov("disable_target", "b", expires_at=NOW + 60)
    assert names(run(c, facts(), snap(overrides=(live,)))) == ["a", "c"]


def test_overrides_fail_closed_with_a_503_saying_so() -> None:
    c = cfg(config())
    for o in (ov("disable_target", "a", oid="42"), ov("drain_provider", "pub", oid="42")):
        with pytest.raises(OverrideNoTarget) as e:
            run(c, facts("solo"), snap(overrides=(o,)))
        assert e.value.status == 503 and e.value.code == "override_no_target"
        assert "override" in e.value.message and "42" in e.value.message
        plan = e.value.plan  # type: ignore[attr-defined]
        assert plan.targets == () and plan.removals[0].override_id == "42"


def test_a_pin_cannot_reach_a_target_the_classes_forbid() -> None:
    c = cfg(config())
    with pytest.raises(OverrideNoTarget):
        run(c, facts("strict"), snap(overrides=(ov("pin_route", "strict", "q"),)))


def test_overrides_fail_closed_even_when_everything_is_cold() -> None:
    c = cfg(config())
    with pytest.raises(OverrideNoTarget):
        run(c, facts("solo"), snap(cold={"pub/a": NOW + 5},
                                   overrides=(ov("disable_target", "a"),)))


def test_drained_endpoint_is_not_brought_back_by_health_fail_open() -> None:
    c = cfg(config())
    s = snap(cold={"pub/a": NOW + 9, "pub/b1": NOW + 5, "paid/c": NOW + 7},
             overrides=(ov("drain_provider", "paid"),))
    p = run(c, facts(), s)
    # b's only endpoint left (pub/b1) is cold, so every remaining target is cold: fail open.
    assert p.health_fail_open
    assert names(p) == ["b", "a"]  # soonest to reopen first
    b = p.targets[0]
    assert [e.key for e in b.endpoints] == ["pub/b1"] and b.cold


def test_coldness_is_judged_on_the_endpoints_a_drain_left() -> None:
    c = cfg(config())
    # b has a warm endpoint, so it is not cold ...
    p = run(c, facts(), snap(cold={"pub/b1": NOW + 9}))
    assert names(p) == ["a", "b", "c"] and not p.targets[1].cold
    # ... until the drain takes that endpoint away: then it is cold and skipped.
    p = run(c, facts(), snap(cold={"pub/b1": NOW + 9}, overrides=(ov("drain_provider", "paid"),)))
    assert names(p) == ["a"]
    assert [(r.target, r.step) for r in p.removals] == [("c", "override"), ("b", "health")]
