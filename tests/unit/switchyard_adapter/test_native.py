"""Route keys → Switchyard settings, the exit guard, the lazy import (``switchyard/native.py``)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import humpyard
import humpyard.switchyard
from humpyard.config.spec import RouteSpec
from humpyard.switchyard.native import (
    REQUIRED_VERSION,
    AlgorithmSpec,
    available,
    installed_version,
    settle_native_threads,
)

PACKAGE = Path(humpyard.switchyard.__file__).parent


def route(type_: str, **kw: object) -> RouteSpec:
    return RouteSpec(name="r", type=type_, targets=(), fallback_on=frozenset(),
                     efficient=("e",), capable=("c",), **kw)  # type: ignore[arg-type]


def test_stage_router_defaults() -> None:
    s = AlgorithmSpec.from_route(route("stage_router"))
    assert (s.mode, s.threshold, s.judge, s.default_category) == (
        "efficient_first", 0.5, False, "efficient")
    s = AlgorithmSpec.from_route(route("stage_router", mode="capable_first",
                                       confidence_threshold=0.0, judge="j"))
    assert (s.mode, s.threshold, s.judge, s.default_category) == (
        "capable_first", 0.0, True, "capable")


def test_llm_classifier_defaults() -> None:
    s = AlgorithmSpec.from_route(route("llm_classifier", judge="j"))
    assert (s.mode, s.threshold, s.judge, s.default_category) == (
        "capability", 0.5, True, "capable")
    s = AlgorithmSpec.from_route(route("llm_classifier", judge="j", mode="escalation"))
    assert (s.mode, s.confirmations, s.default_category) == ("escalation", 2, "efficient")
    s = AlgorithmSpec.from_route(route("llm_classifier", judge="j", mode="escalation",
                                       confirmations=3))
    assert s.confirmations == 3


def test_unknown_modes_and_types_are_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        AlgorithmSpec.from_route(route("stage_router", mode="escalation"))
    with pytest.raises(ValueError, match="mode must be one of"):
        AlgorithmSpec.from_route(route("llm_classifier", mode="efficient_first"))
    with pytest.raises(ValueError, match="not a Switchyard route"):
        AlgorithmSpec.from_route(route("passthrough"))


def test_specs_compare_by_what_builds_the_algorithm() -> None:
    a = AlgorithmSpec.from_route(route("stage_router"))
    assert a == AlgorithmSpec.from_route(route("stage_router", confidence_threshold=0.5))
    assert a != AlgorithmSpec.from_route(route("stage_router", confidence_threshold=0.7))


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, secs: float) -> None:
        self.sleeps.append(secs)
        self.now += secs


def test_settle_waits_while_a_foreign_thread_runs_python() -> None:
    t = FakeTime()
    polls = iter([{1, 99}, {1, 99}, {1}])
    waited = settle_native_threads(clock=t.clock, sleep=t.sleep, frames=lambda: next(polls),
                                   known=lambda: {1})
    assert waited == 2
    assert len(t.sleeps) == 3  # two polls and the final hand-over


def test_settle_gives_up_at_the_deadline() -> None:
    t = FakeTime()
    waited = settle_native_threads(timeout=0.1, clock=t.clock, sleep=t.sleep,
                                   frames=lambda: {1, 99}, known=lambda: {1})
    assert waited == 50 and t.now == pytest.approx(0.105)


def test_only_native_imports_switchyard_and_only_inside_a_function() -> None:
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.split(".")[0] in ("switchyard", "switchyard_rust") and (
                        path.name != "native.py" or id(node) in top):
                    offences.append(f"{path.name}:{node.lineno} imports {name}")
    assert not offences, offences


def test_importing_humpyard_and_the_adapter_does_not_import_switchyard() -> None:
    code = ("import sys, humpyard, humpyard.switchyard.adapter as s\n"
            "s.TieredRouter().forget_routes(set())\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] in "
            "('switchyard', 'switchyard_rust')]\n"
            "assert not loaded, loaded\n")
    shared = Path(humpyard.__file__).parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=shared, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_availability_is_read_from_metadata_without_importing() -> None:
    version = installed_version()
    assert available() == (version == REQUIRED_VERSION)
