"""The planner alone: µs per ``plan()`` for generated configurations.

    python bench/planner_bench.py [--targets 10,100,1000] [--rules 10,50,100] [--quick]

Prints one JSON document. Each cell is a configuration with T targets (spread
over 10 providers, alternating classes, two strengths) and R selector rules
of mixed kinds (header glob, profile, tag, model + prompt size). The request
misses the first R-1 rules and matches the last, which sends it to a
passthrough route over all T targets: the worst case for both dimensions.
``compile_ms`` is the one-off cost of the first ``plan()`` on a fresh config
(the compiled form is cached on the ``Config``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any


def make_config(n_targets: int, n_rules: int) -> str:
    lines = []
    for p in range(10):
        lines += [f"[providers.p{p}]", f'base_url = "http://127.0.0.1:9/v{p}"', ""]
    for i in range(n_targets):
        cls = "public" if i % 2 == 0 else "paid"
        strengths = '["general"]' if i % 3 else '["general", "reasoning"]'
        lines += [f"[targets.t{i}]", f'class = "{cls}"', f"strengths = {strengths}",
                  f"quality = {0.5 + (i % 50) / 100:.2f}",
                  f'endpoints = [{{ provider = "p{i % 10}", model = "m{i}", '
                  f"context_window = {32768 * (1 + i % 4)} }}]", ""]
    names = ", ".join(f'"t{i}"' for i in range(n_targets))
    lines += ["[routes.all]", 'type = "passthrough"', f"targets = [{names}]", ""]
    for r in range(10):
        members = ", ".join(f'"t{(r * 7 + k) % n_targets}"' for k in range(min(5, n_targets)))
        members = ", ".join(dict.fromkeys(members.split(", ")))
        lines += [f"[routes.r{r}]", 'type = "passthrough"', f"targets = [{members}]", ""]
    for i in range(n_rules - 1):
        kind = i % 4
        if kind == 0:
            when = f'{{ header = {{ "x-team" = "team-{i}-*" }} }}'
        elif kind == 1:
            when = f'{{ profile = "profile-{i}" }}'
        elif kind == 2:
            when = f'{{ tag = {{ "project" = "proj-{i}" }} }}'
        else:
            when = f'{{ model = "model-{i}*", prompt_tokens = {{ min = 1000 }} }}'
        lines += ["[[select]]", f'name = "rule-{i}"', f"when = {when}", f'route = "r{i % 10}"',
                  ""]
    lines += ["[[select]]", 'name = "last"', 'when = { profile = "bench" }', 'route = "all"', ""]
    lines += ["[health]", "failure_threshold = 3", ""]
    return "\n".join(lines)


def facts() -> Any:
    from humpyard.planning.types import RequestFacts
    headers = {"x-humpyard-profile": "bench", "x-team": "platform",
               "x-humpyard-tag-project": "gateway", "user-agent": "bench/1"}
    return RequestFacts(model="gpt-bench", headers=headers, prompt_tokens=120,
                        prompt_tokens_low=90)


def measure(n_targets: int, n_rules: int, budget_s: float) -> dict[str, Any]:
    from humpyard.config import load_config_text
    from humpyard.planning.plan import plan
    from humpyard.planning.types import StateSnapshot

    t0 = time.perf_counter()
    config = load_config_text(make_config(n_targets, n_rules), env={})
    load_ms = (time.perf_counter() - t0) * 1000
    f, snap, now, rng = facts(), StateSnapshot(), 1.8e9, random.Random(1)
    t0 = time.perf_counter()
    first = plan(f, snap, config, now, rng)
    compile_ms = (time.perf_counter() - t0) * 1000
    assert first.route == "all" and len(first.targets) == n_targets, (first.route,
                                                                       len(first.targets))
    for _ in range(50):
        plan(f, snap, config, now, rng)
    t0 = time.perf_counter()
    probe = 0
    while time.perf_counter() - t0 < 0.05:
        plan(f, snap, config, now, rng)
        probe += 1
    per_round = max(20, int(probe * budget_s / 5 / 0.05))
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(per_round):
            plan(f, snap, config, now, rng)
        rounds.append((time.perf_counter() - t0) / per_round * 1e6)
    return {"targets": n_targets, "rules": n_rules, "us_per_plan": round(
        statistics.median(rounds), 2), "us_min": round(min(rounds), 2),
        "plans_timed": per_round * 5, "compile_ms": round(compile_ms, 2),
        "load_config_ms": round(load_ms, 1)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--targets", default="10,100,1000")
    p.add_argument("--rules", default="10,50,100")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per cell")
    args = p.parse_args()
    cells = []
    try:
        for t in (int(x) for x in args.targets.split(",")):
            for r in (int(x) for x in args.rules.split(",")):
                cells.append(measure(t, r, args.budget))
    except ImportError as e:
        print(json.dumps({"error": f"planner not importable: {e}"}))
        return 0
    print(json.dumps({"cells": cells, "python": sys.version.split()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
