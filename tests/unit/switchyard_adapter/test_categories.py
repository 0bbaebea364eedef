"""Tiers ↔ Switchyard categories (``switchyard/categories.py``)."""

from humpyard.switchyard.categories import Categories, decode, encode, targets

TIERS = {"efficient": ("e1", "e2"), "capable": ("c1",), "judge": ("j1",)}


def test_ids_carry_their_category() -> None:
    assert encode("judge", "j1") == "judge:j1"
    assert decode("capable:team:big") == ("capable", "team:big")
    assert decode("bare") == ("", "bare")


def test_models_lists_every_category_and_any_never_holds_the_judge() -> None:
    m = Categories.from_tiers(TIERS, judge=True).models()
    assert m == {
        "efficient": ["efficient:e1", "efficient:e2"],
        "capable": ["capable:c1"],
        "any": ["efficient:e1", "efficient:e2", "capable:c1"],
        "judge": ["judge:j1"],
    }


def test_no_judge_category_unless_the_algorithm_uses_one() -> None:
    assert "judge" not in Categories.from_tiers(TIERS, judge=False).models()


def test_an_emptied_tier_is_served_by_the_other() -> None:
    c = Categories.from_tiers({"efficient": ("e1",), "capable": ()}, judge=True)
    assert (c.efficient, c.capable, c.judge) == (("e1",), ("e1",), ("e1",))
    c = Categories.from_tiers({"capable": ("c1",)}, judge=False)
    assert (c.efficient, c.capable) == (("c1",), ("c1",))
    assert Categories.from_tiers({}, judge=True).empty


def test_a_substituted_tier_still_tells_categories_apart() -> None:
    c = Categories.from_tiers({"efficient": ("e1",), "capable": ("e1",)}, judge=True)
    m = c.models()
    assert m["capable"] == ["capable:e1"] and m["judge"] == ["judge:e1"]
    assert targets(m["any"]) == ("e1",)


def test_targets_drop_the_category_and_repeats() -> None:
    assert targets(["capable:c1", "efficient:c1", "efficient:e1"]) == ("c1", "e1")


def test_walk_is_the_chosen_tier_then_the_other() -> None:
    c = Categories.from_tiers(TIERS, judge=True)
    assert c.walk("capable") == ("c1", "e1", "e2")
    assert c.walk("efficient") == ("e1", "e2", "c1")
    assert c.tier("judge") == ("j1",) and c.tier("nope") == ()


def test_an_unplanned_judge_is_the_configured_one_and_a_removed_one_is_substituted() -> None:
    unplanned = {"efficient": ("e1",), "capable": ("c1",)}
    assert Categories.from_tiers(unplanned, judge=True, configured_judge="j").judge == ("j",)
    removed = {**unplanned, "judge": ()}
    assert Categories.from_tiers(removed, judge=True, configured_judge="j").judge == ("e1",)
