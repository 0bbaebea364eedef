"""A pool that resolves to nothing lists what exists (seed 002, "Pools and strengths").

The error names every strength that exists, the closest one when the strength
looks like a typo, and, when ``min_context_window`` or ``min_quality`` emptied
the pool, why each target with the strength left.
"""

from __future__ import annotations

import pytest

from humpyard.config import load_config_text
from humpyard.errors import ConfigError

BASE = '''
[providers.p]
base_url = "http://127.0.0.1:9/v1"

[targets.big]
strengths = ["general", "coding"]
quality = 0.4
endpoints = [{ provider = "p", model = "a", context_window = 8192 }]

[targets.plain]
strengths = ["general"]
endpoints = [{ provider = "p", model = "b" }]

[targets.quick]
strengths = ["fast"]
endpoints = [{ provider = "p", model = "c" }]

[routes.r]
type = "passthrough"
'''


def error_for(pool: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config_text(BASE + f"pool = {pool}\n")
    lines = [ln for ln in str(info.value).splitlines() if "routes.r.pool" in ln]
    assert len(lines) == 1, str(info.value)
    return lines[0]


def assert_lists_strengths(line: str) -> None:
    assert "strengths that exist: 'coding', 'fast', 'general'" in line, line


def test_a_close_typo_lists_the_strengths_and_suggests_one():
    line = error_for('{ strength = "genral" }')
    assert_lists_strengths(line)
    assert "did you mean 'general'?" in line


def test_a_strength_close_to_nothing_lists_the_strengths():
    line = error_for('{ strength = "vision" }')
    assert_lists_strengths(line)
    assert "did you mean" not in line


def test_min_context_window_says_why_each_target_left():
    line = error_for('{ strength = "general", min_context_window = 32000 }')
    assert "'big' has context_window 8192 < min_context_window 32000" in line
    assert "'plain' declares no context_window" in line
    assert_lists_strengths(line)


def test_min_quality_says_why_each_target_left():
    line = error_for('{ strength = "general", min_quality = 0.7 }')
    assert "'big' has quality 0.4 < min_quality 0.7" in line
    assert "'plain' declares no quality" in line
    assert_lists_strengths(line)


def test_a_pool_that_resolves_still_loads():
    cfg = load_config_text(BASE + 'pool = { strength = "general" }\n')
    assert cfg.routes["r"].targets == ("big", "plain")
