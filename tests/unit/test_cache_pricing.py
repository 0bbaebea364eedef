"""Cache tokens in a decision's usage and cost (``ledger/decision.py``, ``EndpointSpec``)."""

from __future__ import annotations

import pytest

from humpyard.config.spec import EndpointSpec
from humpyard.ledger.decision import Tokens, token_counts


def test_anthropic_usage_keeps_its_cache_counts():
    usage = {"prompt_tokens": 1250, "completion_tokens": 20,
             "prompt_tokens_details": {"cached_tokens": 1000},
             "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}
    assert token_counts(usage) == Tokens(1250, 20, 1000, 200)


def test_openai_usage_reports_cache_reads_in_its_details():
    usage = {"prompt_tokens": 900, "completion_tokens": 3,
             "prompt_tokens_details": {"cached_tokens": 512, "cache_write_tokens": 64}}
    assert token_counts(usage) == Tokens(900, 3, 512, 64)
    assert token_counts({"prompt_tokens": 9, "completion_tokens": True,
                         "prompt_tokens_details": None}) == Tokens(9, 0, 0, 0)


def test_cache_tokens_cost_their_own_price():
    ep = EndpointSpec("p", "m", price_input=3, price_output=15, price_cache_read=0.3,
                      price_cache_write=3.75)
    assert ep.cost_usd(1250, 20, 1000, 200) == pytest.approx(
        (50 * 3 + 1000 * 0.3 + 200 * 3.75 + 20 * 15) / 1e6)


def test_undeclared_cache_prices_cost_the_input_price():
    ep = EndpointSpec("p", "m", price_input=2, price_output=10)
    assert ep.cost_usd(1000, 10, 800, 100) == ep.cost_usd(1000, 10) == \
        pytest.approx((1000 * 2 + 10 * 10) / 1e6)


def test_a_free_cache_read_is_free():
    ep = EndpointSpec("p", "m", price_input=1, price_output=1, price_cache_read=0)
    assert ep.cost_usd(100, 0, 100, 0) == 0


def test_counts_sent_as_floats_are_counted_not_dropped():
    """An upstream that sent ``100.7`` prompt tokens was charged nothing: a float count
    read as 0. A finite positive float now counts, rounded up."""
    assert token_counts({"prompt_tokens": 100.7, "completion_tokens": 20.0}) == \
        Tokens(101, 20, 0, 0)
    for bad in (float("nan"), float("inf"), -3.0, "12"):
        assert token_counts({"prompt_tokens": bad, "completion_tokens": 1}).input == 0
