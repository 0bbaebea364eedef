"""Turning ``results`` (the dict ``run.py`` builds) into goals, markdown and the README block."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

LITELLM_REFERENCE_RPS = 176.0  # LiteLLM proxy on this machine kind, when PEERS=1 did not run
GATEWAYS = ("humpyard", "humpyard+ledger", "litellm", "switchyard")


def _get(d: Any, *path: Any) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def added(results: dict[str, Any]) -> dict[str, Any]:
    """Per gateway: its p50/p99 minus the direct (simulator) figures, same mode and load."""
    direct = _get(results, "targets", "direct", "latency") or {}
    out: dict[str, Any] = {}
    for name in GATEWAYS:
        lat = _get(results, "targets", name, "latency")
        if not lat:
            continue
        rows = {}
        for run, d in lat.items():
            base = direct.get(run)
            if not base:
                continue
            rows[run] = {k: round(d[k] - base[k], 3) for k in d
                         if k.endswith("_ms") and isinstance(d.get(k), int | float)
                         and isinstance(base.get(k), int | float)}
        out[name] = rows
    return out


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The stated targets, each with the measured value and whether it is met."""
    add = results.get("added", {}).get("humpyard", {})
    hy = _get(results, "targets", "humpyard") or {}
    lite_rps = _get(results, "targets", "litellm", "throughput", "buffered_c32", "rps")
    ref = lite_rps or LITELLM_REFERENCE_RPS
    rps = _get(hy, "throughput", "buffered_c32", "rps")
    planner = next((c for c in _get(results, "planner", "cells") or []
                    if c["targets"] == 100 and c["rules"] == 50), None)
    cold = _get(results, "cold_start", "app", "import_ms")
    cold_lambda = _get(results, "cold_start", "lambda", "import_ms")
    ledger_dps = _get(results, "ledger", "decisions_per_s")
    rows = [
        ("added p50, 1 connection, buffered", "<= 0.5 ms",
         _get(add, "buffered_c1", "total_p50_ms"), lambda v: v <= 0.5, "ms"),
        (f"requests/s at 32 connections (>= 10x LiteLLM's {ref:.0f}"
         f"{'' if lite_rps else ', reference'})", f">= {10 * ref:.0f}",
         rps, lambda v: v >= 10 * ref, "req/s"),
        ("streamed overhead, first byte (p50, 1 connection)", "<= 1 ms",
         _get(add, "stream_c1", "ttfb_p50_ms"), lambda v: v <= 1.0, "ms"),
        ("streamed overhead, whole answer (p50, 1 connection)", "<= 1 ms",
         _get(add, "stream_c1", "total_p50_ms"), lambda v: v <= 1.0, "ms"),
        ("planner, 100 targets, 50 rules", "<= 50 us",
         planner and planner["us_per_plan"], lambda v: v <= 50, "us"),
        ("cold import of humpyard.http.app (unchecked-hash bytecode, median)", "<= 250 ms",
         cold,
         lambda v: v <= 250, "ms"),
        ("cold import of the Lambda entry functions/gateway/app.py (bytecode, median)",
         "<= 250 ms", cold_lambda, lambda v: v <= 250, "ms"),
        ("idle RSS", "<= 80 MB", _get(hy, "memory", "idle_mb"), lambda v: v <= 80, "MB"),
        (f"SQLite ledger writer, sustained decisions/s on one core (>= 5x the {_f(rps, 0)} "
         "req/s above)", f">= {5 * rps:.0f}" if rps else ">= 5x", ledger_dps,
         (lambda v: v >= 5 * rps) if rps else (lambda v: False), "decisions/s"),
        ("paced streams, 1,000 concurrent: added to the direct stream time (mean)", "<= 5 %",
         _get(results, "paced", "c1000", "added_pct_mean"), lambda v: v <= 5, "%"),
        ("paced streams, 2,000 concurrent: added to the direct stream time (mean)", "<= 5 %",
         _get(results, "paced", "c2000", "added_pct_mean"), lambda v: v <= 5, "%"),
    ]
    out = []
    for what, goal, value, ok, unit in rows:
        out.append({"goal": what, "target": goal, "measured": value, "unit": unit,
                    "met": None if value is None else bool(ok(value))})
    return out


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _met(m: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "–"}[m]


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [f"# humpyard benchmark — {results['finished']}", "",
             f"Machine: {m['nproc']} cores, {m['cpu_model']}, Python {m['python']}, "
             f"{m['kernel']}. Pinning: {m['pinning']}. Load generator: {m['loadgen']}. "
             f"Priority: {results.get('priority', 'default')}.",
             f"Command: `{results['command']}` ({results['duration_s']:.0f} s). "
             f"Load average before/after: {m['loadavg_before']} / {m['loadavg_after']}.", ""]
    noisy = [f"{n} ({t['other_cpu_share']:.0%})" for n, t in results["targets"].items()
             if (t.get("other_cpu_share") or 0) > 0.10]
    if noisy:
        lines += [f"> Other processes used a noticeable share of the machine during: "
                  f"{', '.join(noisy)}. Wall-clock numbers are noisy; the CPU µs per "
                  "request column is the steadier figure.", ""]
    lines += ["## Goals (humpyard, no ledger)", "", "| goal | target | measured | met |",
              "|---|---|---|---|"]
    for g in results["goals"]:
        lines.append(f"| {g['goal']} | {g['target']} | {_f(g['measured'])} {g['unit']} | "
                     f"{_met(g['met'])} |")
    lines += ["", "## Latency (ms; TTFB = first body byte, total = last byte)", "",
              "| server | run | p50 TTFB | p99 TTFB | p50 total | p99 total | added p50 | "
              "added p99 | req/s | server CPU µs/req |", "|---" * 10 + "|"]
    for name, t in results["targets"].items():
        if t.get("skipped"):
            lines.append(f"| {t['label']} | skipped: {t['skipped']} |||||||||")
            continue
        for run, d in (t.get("latency") or {}).items():
            a = _get(results, "added", name, run) or {}
            lines.append(f"| {t['label']} | {run} | {_f(d['ttfb_p50_ms'], 3)} | "
                         f"{_f(d['ttfb_p99_ms'], 3)} | {_f(d['total_p50_ms'], 3)} | "
                         f"{_f(d['total_p99_ms'], 3)} | {_f(a.get('total_p50_ms'), 3)} | "
                         f"{_f(a.get('total_p99_ms'), 3)} | {_f(d['rps'], 0)} | "
                         f"{_f(d.get('cpu_us_per_request'), 0)} |")
    lines += ["", "## Throughput at 32 connections and memory", "",
              "| server | version | buffered req/s | p50 / p99 ms | streamed req/s | p50 / p99 ms "
              "| errors | RSS idle MB | RSS peak under load MB |",
              "|---|---|---|---|---|---|---|---|---|"]
    for t in results["targets"].values():
        if t.get("skipped"):
            continue
        b = _get(t, "throughput", "buffered_c32") or {}
        s = _get(t, "throughput", "stream_c32") or {}
        mem = t.get("memory") or {}
        errs = (b.get("errors") or 0) + (s.get("errors") or 0)
        lines.append(f"| {t['label']} | {t.get('version') or '–'} | {_f(b.get('rps'), 0)} | "
                     f"{_f(b.get('p50_ms'), 1)} / {_f(b.get('p99_ms'), 1)} | "
                     f"{_f(s.get('rps'), 0)} | {_f(s.get('p50_ms'), 1)} / "
                     f"{_f(s.get('p99_ms'), 1)} | {errs} | {_f(mem.get('idle_mb'), 1)} | "
                     f"{_f(mem.get('peak_mb'), 1)} |")
    lines += (_planner_md(results) + _ledger_md(results) + _cold_md(results)
              + _paced_md(results))
    lines += ["", "Raw numbers: `bench/results/latest.json`. How each figure is taken: "
              "`bench/README.md`.", ""]
    return "\n".join(lines)


def _ledger_md(results: dict[str, Any]) -> list[str]:
    led = results.get("ledger")
    if led is None:
        return []
    if "decisions_per_s" not in led:
        return ["", "## Ledger writer", "", f"Not measured: {led.get('error', 'skipped')}"]
    return ["", "## Ledger writer (SQLite, `bench/ledger_bench.py`, one core)", "",
            "| decisions/s | mean batch (items) | mean write ms | CPU µs/decision | "
            "median lag ms | lost |", "|---|---|---|---|---|---|",
            f"| {led['decisions_per_s']} | {led['mean_batch_items']} | "
            f"{led['mean_write_ms']} | {led['cpu_us_per_decision']} | "
            f"{_f(led['median_lag_ms'], 1)} | {led['lost']} |"]


def _planner_md(results: dict[str, Any]) -> list[str]:
    p = results.get("planner") or {}
    if "cells" not in p:
        return ["", "## Planner", "", f"Not measured: {p.get('error', 'skipped')}"]
    rules = sorted({c["rules"] for c in p["cells"]})
    out = ["", "## Planner (µs per plan; last rule matches, route over all targets)", "",
           "| targets | " + " | ".join(f"{r} rules" for r in rules) + " | compile ms |",
           "|---" * (len(rules) + 2) + "|"]
    for t in sorted({c["targets"] for c in p["cells"]}):
        cells = {c["rules"]: c for c in p["cells"] if c["targets"] == t}
        out.append(f"| {t} | " + " | ".join(_f(cells[r]["us_per_plan"], 1) for r in rules)
                   + f" | {_f(max(c['compile_ms'] for c in cells.values()), 1)} |")
    return out


def _cold_md(results: dict[str, Any]) -> list[str]:
    c = results.get("cold_start") or {}
    if not c:
        return []
    it = c.get("importtime") or {}
    out = ["", "## Cold start (median of fresh processes, ms)", "",
           f"Interpreter alone: {_f(c.get('interpreter_ms'), 1)}. "
           f"`-X importtime` of `humpyard.http.app`: {_f(it.get('cumulative_ms'), 1)}.", "",
           "| entry | import | build | first answer | import → answer | spawn → answer |",
           "|---|---|---|---|---|---|"]
    for name, label in (("app", "create_app + ASGI chat request, unchecked-hash bytecode"),
                        ("app_no_bytecode", "same, compiled from source every start"),
                        ("lambda", "functions/gateway/app.py handler, REST event")):
        d = c.get(name) or {}
        if "error" in d:
            out.append(f"| {label} | not measured: {d['error'].splitlines()[-1][:160]} |||||")
            continue
        out.append(f"| {label} | {_f(d.get('import_ms'), 1)} | "
                   f"{_f(d.get('create_app_ms'), 1)} | "
                   f"{_f(d.get('first_request_ms', d.get('first_invoke_ms')), 1)} | "
                   f"{_f(d.get('to_first_answer_ms'), 1)} | "
                   f"{_f(d.get('spawn_to_answer_ms'), 1)} |")
    heavy = it.get("own_ms_by_package") or []
    if heavy:
        out += ["", "Own import time by package: " + ", ".join(
            f"{h['package']} {h['ms']:.0f}" for h in heavy[:10]) + " (ms)."]
    return out


def readme_block(results: dict[str, Any]) -> str:
    m = results["machine"]
    rows = ["| goal | target | measured | met |", "|---|---|---|---|"]
    for g in results["goals"]:
        rows.append(f"| {g['goal']} | {g['target']} | {_f(g['measured'])} {g['unit']} | "
                    f"{_met(g['met'])} |")
    return "\n".join([
        f"Last run {results['finished']} on {m['nproc']} cores ({m['cpu_model']}), "
        f"Python {m['python']}, `{results['command']}`; full tables in "
        "`bench/results/latest.md`.", "", *rows, *_peers_line(results)])


def _peers_line(results: dict[str, Any]) -> list[str]:
    """The same run's figures for the peers, so the goals read against them."""
    parts = []
    for name, label in (("humpyard", "humpyard"), ("switchyard", "Switchyard (Rust)"),
                        ("litellm", "LiteLLM")):
        added = _get(results, "added", name, "buffered_c1", "total_p50_ms")
        rps = _get(results, "targets", name, "throughput", "buffered_c32", "rps")
        if added is not None or rps is not None:
            parts.append(f"{label} {_f(added)} ms / {_f(rps, 0)} req/s")
    if len(parts) < 2:
        return []
    return ["", "Same run, added p50 at one connection / buffered requests/s at 32 "
            "connections: " + "; ".join(parts) + "."]


def replace_block(readme: Path, block: str) -> bool:
    """Replace what is between the bench markers in ``readme``; False when absent."""
    text = readme.read_text()
    pattern = re.compile(r"(<!-- bench:start -->\n).*?(<!-- bench:end -->)", re.DOTALL)
    if not pattern.search(text):
        return False
    readme.write_text(pattern.sub(lambda mo: mo.group(1) + block + "\n" + mo.group(2), text))
    return True


def _paced_md(results: dict[str, Any]) -> list[str]:
    paced = results.get("paced")
    if not paced:
        return []
    lines = ["", f"## Paced streams (a chunk every {paced.get('interval_ms', 200):.0f} ms, "
             f"{paced.get('direct_answer_ms')} ms per answer direct)", "",
             "| streams | server | streams/s | p50 ms | p99 ms | mean ms | added (mean) | "
             "gateway CPU share | gateway CPU µs per stream | gateway waiting for a CPU | "
             "errors |", "|---" * 11 + "|"]
    for key, row in paced.items():
        if not key.startswith("c") or not isinstance(row, dict):
            continue
        for who in ("direct", "humpyard", "humpyard_ledger", "humpyard_w2", "humpyard_x2",
                    "humpyard_w2_cores"):
            d = row.get(who)
            if d is None:
                continue
            added = row.get("added_pct_mean" if who == "humpyard" else f"added_pct_mean_{who}")
            label = {"humpyard_w2": "humpyard --workers 2 (SQLite file)",
                     "humpyard_x2": "two separate humpyard (a ledger each; reference)",
                     "humpyard_ledger": "humpyard (SQLite ledger)",
                     "humpyard_w2_cores": "humpyard --workers 2, a core per worker"}.get(who, who)
            for w in d.get("per_worker", ()):
                where = "beside the load generator" if w["shares_core_with_load"] \
                    else "alone"
                label += (f"; core {w['core']} ({where}): {w['connections']} connections, "
                          f"{_f(w['cpu_us_per_stream'], 0)} µs a stream")
            lines.append(f"| {d['streams']} | {label} | {_f(d['streams_per_s'], 1)} | "
                         f"{_f(d['p50_ms'])} | {_f(d['p99_ms'])} | {_f(d['mean_ms'])} | "
                         f"{_f(added, 1) + ' %' if who != 'direct' else '–'} | "
                         f"{_f(d.get('gateway_cpu_share'), 2)} | "
                         f"{_f(d.get('gateway_cpu_us_per_stream'), 0)} | "
                         f"{_f(d.get('gateway_runqueue_wait_share'), 2)} | {d['errors']} |")
    return lines
