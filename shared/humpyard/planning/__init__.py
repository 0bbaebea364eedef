"""The pure planning step: request facts + state snapshot + config → ``Plan``.

Nothing in this package does I/O or imports httpx, boto3, sqlite3 or
starlette (a test enforces it). The executor walks the ``Plan``; the ledger
stores it; explain prints it.

Public entry points: ``plan`` (per request), ``explain``, ``compile_config``
(per configuration; cached on the ``Config``), ``select_route``,
``estimate_prompt_tokens``/``request_traits``/``analyse_request``,
``fold_latency``, and the policies ``RoutingPolicy``, ``AllowAll``,
``BudgetPolicy``, ``compose``.
"""

from humpyard.planning.compiled import CompiledConfig, compile_config
from humpyard.planning.estimate import (
    PromptShape,
    analyse_request,
    estimate_prompt_tokens,
    request_traits,
)
from humpyard.planning.explain import explain
from humpyard.planning.order import fold_latency
from humpyard.planning.plan import plan
from humpyard.planning.policy import AllowAll, BudgetPolicy, RoutingPolicy, compose
from humpyard.planning.select import Selection, compile_rules, select_route

__all__ = [
    "AllowAll", "BudgetPolicy", "CompiledConfig", "PromptShape", "RoutingPolicy", "Selection",
    "analyse_request", "compile_config", "compile_rules", "compose", "estimate_prompt_tokens",
    "explain", "fold_latency", "plan", "request_traits", "select_route",
]
