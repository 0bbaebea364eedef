"""Budget reservations and provider pacing in the (pure) planner."""

from __future__ import annotations

import pytest

from humpyard.errors import BudgetExhausted
from humpyard.planning.policy import UNBOUNDED_OUTPUT_TOKENS, output_bound, worst_cost
from humpyard.planning.types import StateSnapshot

from .helpers import NOW, cfg, facts, names, removed, route, run, target

# $1 per million tokens in, $2 out: 1,000 prompt tokens and 1,000 output cost $0.003
PRICE = "price = { input = 1.0, output = 2.0 }"
KEY = '[keys.ci]\nkey_sha256 = "' + "0" * 64 + '"\nbudget = { usd = 0.01 }\n'


def config(max_output: str = "") -> str:
    return (target("free") + target("paid", provider="paid", endpoint=PRICE + max_output)
            + route("r", ["paid", "free"]) + route("paid-only", ["paid"]) + KEY)


def state(spent: float = 0.0, reserved: float = 0.0) -> StateSnapshot:
    return StateSnapshot(spend_usd={"ci": spent}, reserved_usd={"ci": reserved}, taken_at=NOW)


def test_the_worst_case_is_the_prompt_and_the_output_bound_at_the_price():
    c = cfg(config(", max_output_tokens = 500"))
    (ep,) = c.targets["paid"].endpoints
    assert output_bound(ep, None) == 500 and output_bound(ep, 100) == 100
    assert output_bound(ep, 9000) == 500  # clamped to the endpoint's limit when sent
    (free,) = c.targets["free"].endpoints
    assert output_bound(free, None) == UNBOUNDED_OUTPUT_TOKENS
    f = facts(prompt_tokens=1000, max_tokens=1000)
    assert worst_cost([ep], f) == pytest.approx((1000 * 1 + 500 * 2) / 1e6)
    assert worst_cost([free], f) == 0.0


def test_what_is_reserved_counts_like_what_is_spent():
    c = cfg(config())
    f = facts(key_id="ci", prompt_tokens=1000, max_tokens=1000)  # may cost $0.003
    assert names(run(c, f, state(spent=0.007))) == ["paid", "free"]  # $0.003 fits exactly
    p = run(c, f, state(spent=0.004, reserved=0.004))  # $0.002 left
    assert names(p) == ["free"] and removed(p, "budget") == {"paid": "budget_exhausted"}
    with pytest.raises(BudgetExhausted) as e:
        run(c, facts("paid-only", key_id="ci", prompt_tokens=1000, max_tokens=1000),
            state(spent=0.004, reserved=0.004))
    assert ("$0.0040 is reserved by requests in flight, and this request may cost up to "
            "$0.0030; the budget resets at 2027-01-16T00:00:00Z") in e.value.message


def test_a_smaller_max_tokens_fits_where_a_larger_does_not():
    c = cfg(config())
    s = state(spent=0.008)
    assert names(run(c, facts(key_id="ci", prompt_tokens=100, max_tokens=900), s))[0] == "paid"
    assert names(run(c, facts(key_id="ci", prompt_tokens=100, max_tokens=1000), s)) == ["free"]


def paced(*keys: str, until: float = NOW + 10) -> StateSnapshot:
    return StateSnapshot(paced=dict.fromkeys(keys, until), taken_at=NOW)


def test_pacing_skips_a_paced_target_only_for_an_unpaced_one():
    c = cfg(target("a", provider="pub") + target("b", provider="paid")
            + route("r", ["a", "b"]) + route("one", ["a"]))
    p = run(c, facts(), paced("pub/a"))
    assert names(p) == ["b"] and removed(p, "pacing") == {"a": "upstream_rate_limited"}
    assert names(run(c, facts(), paced("pub")))[0] == "b"  # a provider paced as a whole
    assert names(run(c, facts(), paced("pub/a", until=NOW))) == ["a", "b"]  # its reset came
    assert names(run(c, facts(), paced("pub/a", "paid/b"))) == ["a", "b"]  # never empties
    assert names(run(c, facts("one"), paced("pub/a"))) == ["a"]
