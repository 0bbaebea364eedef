"""The only module that imports ``switchyard`` (nemo-switchyard 0.3.0), and only on demand.

``load()`` imports ``switchyard.libsy`` the first time a tiered route runs and
registers ``settle_native_threads`` with ``atexit``. Why: the extension
completes each awaitable on a tokio worker thread, which takes the GIL to
hand the result to the event loop (``call_soon_threadsafe``) and drops the
GIL while waking the loop. If the interpreter starts finalising in that
window, CPython 3.11 ends the worker with ``pthread_exit`` when it asks for
the GIL back, unwinding through Rust frames that still own Python objects:
a segfault or ``Fatal Python error: PyGILState_Release`` at exit, in about
one run in three of a short script. ``atexit`` handlers run before
finalisation begins, so waiting there until no foreign thread is inside
Python closes the window. Nothing here calls ``os._exit``.

``AlgorithmSpec`` turns a route's keys into Switchyard's constructor
arguments, with Switchyard's documented defaults.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from humpyard.config.spec import RouteSpec
from humpyard.errors import ConfigError

STAGE_MODES = ("efficient_first", "capable_first")
CLASSIFIER_MODES = ("capability", "escalation")
DEFAULT_CONFIDENCE_THRESHOLD = 0.5
"""stage_router ``confidence_threshold``: Switchyard requires it and recommends 0.5."""
DEFAULT_BASE_THRESHOLD = 0.5
"""llm_classifier capability ``base_threshold`` (lowest p_solve that keeps a task efficient)."""
DEFAULT_CONFIRMATIONS = 2
"""llm_classifier escalation ``confirmations``: Switchyard's default."""

SETTLE_TIMEOUT_SECS = 2.0


REQUIRED_VERSION = "0.3.0"


def installed_version() -> str | None:
    """The installed nemo-switchyard version, without importing it (``None``: absent)."""
    try:
        return importlib.metadata.version("nemo-switchyard")
    except importlib.metadata.PackageNotFoundError:
        return None


def available() -> bool:
    """Whether the nemo-switchyard this adapter was written against is installed."""
    return installed_version() == REQUIRED_VERSION


@functools.cache
def load() -> Any:
    """``switchyard.libsy``, imported once; registers the exit guard on first use.

    Raises ``ConfigError`` when nemo-switchyard is not installed.
    """
    try:
        import switchyard.libsy as libsy  # also imports libsy.algorithms, the factories
    except ImportError as exc:
        raise ConfigError(
            f"stage_router and llm_classifier routes need nemo-switchyard=={REQUIRED_VERSION}"
            " (pip install 'humpyard[switchyard]')") from exc
    atexit.register(settle_native_threads)
    return libsy


def settle_native_threads(
    *, timeout: float = SETTLE_TIMEOUT_SECS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    frames: Callable[[], Iterable[int]] | None = None,
    known: Callable[[], set[int | None]] | None = None,
) -> int:
    """Wait (at most ``timeout``) until no thread unknown to ``threading`` runs Python.

    A tokio worker handing back a result runs ``call_soon_threadsafe``, a
    Python function, so it shows in ``sys._current_frames()`` until it is
    done; sleeping releases the GIL it is waiting for. Returns how many
    polls found such a thread (for tests).
    """
    frames = frames or (lambda: sys._current_frames().keys())
    mine = known() if known else {t.ident for t in threading.enumerate()}
    deadline = clock() + timeout
    waited = 0
    while clock() < deadline and any(i not in mine for i in frames()):
        waited += 1
        sleep(0.002)
    sleep(0.005)  # let a worker that just left Python release the GIL
    return waited


@dataclass(frozen=True, slots=True)
class AlgorithmSpec:
    """What decides a Switchyard algorithm instance: equal specs may share session state."""

    type: str
    mode: str
    threshold: float | None = None
    confirmations: int | None = None
    judge: bool = False

    @classmethod
    def from_route(cls, route: RouteSpec) -> AlgorithmSpec:
        """The spec of a ``stage_router`` or ``llm_classifier`` route, defaults filled in."""
        if route.type == "stage_router":
            mode = route.mode or STAGE_MODES[0]
            _check(route, mode, STAGE_MODES)
            threshold = route.confidence_threshold
            return cls(type=route.type, mode=mode,
                       threshold=DEFAULT_CONFIDENCE_THRESHOLD if threshold is None else threshold,
                       judge=route.judge is not None)
        if route.type == "llm_classifier":
            mode = route.mode or CLASSIFIER_MODES[0]
            _check(route, mode, CLASSIFIER_MODES)
            if mode == "capability":
                threshold = route.confidence_threshold
                return cls(type=route.type, mode=mode, judge=True,
                           threshold=DEFAULT_BASE_THRESHOLD if threshold is None else threshold)
            return cls(type=route.type, mode=mode, judge=True,
                       confirmations=route.confirmations or DEFAULT_CONFIRMATIONS)
        raise ValueError(f"route {route.name!r}: type {route.type!r} is not a Switchyard route")

    @property
    def default_category(self) -> str:
        """The tier served when Switchyard cannot decide (its own fail-open tier)."""
        if self.type == "stage_router":
            return "capable" if self.mode == "capable_first" else "efficient"
        return "capable" if self.mode == "capability" else "efficient"

    def build(self, libsy: Any) -> Any:
        """A new ``switchyard.libsy.Algorithm`` (with empty session state)."""
        factories = libsy.algorithms
        if self.type == "stage_router":
            classifier = (libsy.LlmFallback(config=libsy.TaskClassifierConfig(
                DEFAULT_BASE_THRESHOLD)) if self.judge else None)
            return factories.stage_router(picker=self.mode, confidence_threshold=self.threshold,
                                          classifier=classifier)
        if self.mode == "capability":
            config = libsy.LlmClassifierConfig.capability(
                config=libsy.TaskClassifierConfig(self.threshold))
        else:
            config = libsy.LlmClassifierConfig.escalation(
                config=libsy.EscalationClassifierConfig(confirmations=self.confirmations))
        return factories.llm_classifier(config)


def _check(route: RouteSpec, mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        raise ValueError(f"route {route.name!r}: mode must be one of {list(allowed)}, "
                         f"got {mode!r}")
