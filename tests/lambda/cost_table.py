"""docs/deploy.md's cost table, computed from measured per-request units.

``render`` turns what ``tests/unit/aws/per_request.py`` measured (DynamoDB
write and read units per warm request), the log bytes per request
``test_lambda_cost.py`` measured and the handler's CPU per request
(``HANDLER_CPU_MS``, which that test checks on every run) into the table; ``read``/``write`` get and
replace the table between the markers in docs/deploy.md; ``compare`` lists
every cell of the document that is not what was measured, within the
measurement's noise. Prices are us-east-1 list prices (sources in
docs/deploy.md, "What it costs"); the provisioned figure assumes every table
and index runs at the auto scaling target the template sets by default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
BEGIN = ("<!-- cost-table: computed from the measurements by tests/lambda/test_lambda_cost.py; "
         "HUMPYARD_WRITE_COST_TABLE=1 rewrites it -->")
END = "<!-- /cost-table -->"

ON_DEMAND_PER_WRITE_UNIT = 0.625 / 1e6
ON_DEMAND_PER_READ_UNIT = 0.125 / 1e6
WCU_HOUR = 0.00065
RCU_HOUR = 0.00013
LOGS_PER_BYTE = 0.50 / 1e9  # $0.50 per GB ingested
LAMBDA_GB_SECOND = 0.0000133334  # arm64
MEMORY_GB = 0.5  # FunctionMemoryMb's default
VCPU_SHARE = 512 / 1769  # Lambda gives a full vCPU at 1,769 MB, in proportion below
HANDLER_CPU_MS = 14.0
"""CPU milliseconds of one warm request, everything included: the handler, the writer's
thread and the CPU inside the DynamoDB calls (botocore, and moto standing in for the
service's round trips). Measured by test_lambda_cost.py (the median of 300 warm requests,
``time.process_time`` around the handler) on a 2-core AMD EPYC development VM shared with
other test runs, 2026-12-02: medians of 8.6-12.5 ms across runs (one: 9.5 ms, 6.6 of them
inside the DynamoDB calls); issue 26 reported 12.5-14.2 ms. The table takes the top of all
of that. The test reports each run's figure and does not assert on it: the same code
measured 7.1 ms in one run and 21-23 ms in others on this VM (its CPU speed moves)."""
GOAL = 1.50

SCENARIOS = {"no budget": "key without budget", "budgeted key": "budgeted key, priced answer"}


class _Loader(yaml.SafeLoader):
    """YAML that skips CloudFormation's short tags (the parameters have none)."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _template() -> dict[str, Any]:
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=_Loader)  # type: ignore[no-any-return]  # noqa: S506


def target_utilization() -> float:
    """The auto scaling target of the provisioned tables, as the template's default."""
    return float(_template()["Parameters"]["TableTargetUtilization"]["Default"]) / 100


def metrics_environment() -> dict[str, str]:
    """The ``HUMPYARD_*_INTERVAL_SECS`` variables the template gives every function (what
    the measured instance must run with for its log bytes to be a deployed one's)."""
    variables = _template()["Globals"]["Function"]["Environment"]["Variables"]
    return {k: str(v) for k, v in variables.items() if k.endswith("_INTERVAL_SECS")}


def per_million(write_units: float, read_units: float, log_bytes: float) -> dict[str, float]:
    """Dollars per million requests of each item, both billing modes."""
    target = target_utilization()
    return {
        "on demand": 1e6 * (write_units * ON_DEMAND_PER_WRITE_UNIT
                            + read_units * ON_DEMAND_PER_READ_UNIT),
        "provisioned": 1e6 * (write_units * WCU_HOUR + read_units * RCU_HOUR) / 3600 / target,
        "logs": 1e6 * log_bytes * LOGS_PER_BYTE,
        "lambda": 1e6 * lambda_seconds() * MEMORY_GB * LAMBDA_GB_SECOND,
    }


def lambda_seconds(cpu_ms: float = HANDLER_CPU_MS) -> float:
    """Billed Lambda seconds of ``cpu_ms`` of a full core's CPU at 512 MB (0.29 of a vCPU)."""
    return cpu_ms / 1000 / VCPU_SHARE


def render(measured: dict[str, dict[str, Any]], *, log_bytes: float) -> str:
    """The table (markers included) for ``measured`` scenarios (``per_request.measure``)."""
    target = round(target_utilization() * 100)
    lines = [BEGIN, "",
             "Measured per warm request (one instance, requests 1.1 s apart; a decision "
             "is one item, no index entry; CPU of a full core, DynamoDB calls included, "
             "and the Lambda time it takes at 512 MB):", "",
             "| scenario | write units | read units | log bytes | CPU ms | Lambda ms |",
             "|---|---|---|---|---|---|"]
    for key, label in SCENARIOS.items():
        m = measured[key]
        lines.append(f"| {label} | {m['units']:.2f} | {m['read_units']:.2f} | "
                     f"{log_bytes:.0f} | {HANDLER_CPU_MS:.1f} | "
                     f"{lambda_seconds() * 1000:.1f} |")
    lines += ["", "Per million requests:", "",
              "| scenario | DynamoDB billing | DynamoDB | logs | the gateway's Lambda time "
              "| total | goal ≤ $1.50 |", "|---|---|---|---|---|---|---|"]
    for key, label in SCENARIOS.items():
        m = measured[key]
        cost = per_million(m["units"], m["read_units"], log_bytes)
        for mode, name in (("on demand", "on demand"),
                           ("provisioned", f"provisioned, {target}% utilised")):
            total = cost[mode] + cost["logs"] + cost["lambda"]
            lines.append(f"| {label} | {name} | ${cost[mode]:.2f} | ${cost['logs']:.2f} | "
                         f"${cost['lambda']:.2f} | ${total:.2f} | "
                         f"{'met' if total <= GOAL else 'not met'} |")
    return "\n".join(lines + ["", END])


def read(path: Path = DOC) -> str:
    """The table in the document, markers included ('' if there is none)."""
    text = path.read_text()
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end + len(END)] if start >= 0 and end > start else ""


def write(table: str, path: Path = DOC) -> None:
    """Replace the document's table with ``table``."""
    text = path.read_text()
    old = read(path)
    assert old, f"{path} has no {BEGIN!r} ... {END!r} section"
    path.write_text(text.replace(old, table))


def _cells(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("|") and "---" not in line]


def _number(cell: str) -> float | None:
    found = re.fullmatch(r"\$?([0-9][0-9,]*(?:\.[0-9]+)?)", cell)
    return float(found.group(1).replace(",", "")) if found else None


def compare(document: str, measured: str) -> list[str]:
    """Every cell of ``document`` that differs from ``measured`` beyond the noise: units
    by 0.02, log bytes by 10%, dollars by a cent or 3%; words exactly."""
    if not document:
        return ["docs/deploy.md has no cost table"]
    doc_rows, new_rows = _cells(document), _cells(measured)
    if [r[:2] for r in doc_rows] != [r[:2] for r in new_rows]:
        return ["the rows differ: " + str([r[:2] for r in doc_rows])]
    problems = []
    for doc_row, new_row in zip(doc_rows, new_rows, strict=True):
        for i, (was, now) in enumerate(zip(doc_row, new_row, strict=True)):
            a, b = _number(was), _number(now)
            if a is None or b is None:
                ok = was == now
            elif now.startswith("$"):
                ok = abs(a - b) <= max(0.01, 0.03 * b)
            elif "." in now:
                ok = abs(a - b) <= 0.02
            else:
                ok = abs(a - b) <= max(5.0, 0.10 * b)
            if not ok:
                problems.append(f"{doc_row[0]} / column {i + 1}: the document says {was}, "
                                f"measured {now}")
    return problems
