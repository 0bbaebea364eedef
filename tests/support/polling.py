"""Waiting on something another thread or process does: poll with a deadline, never a
fixed sleep (a loaded 2-core CI machine stalls for whole seconds)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(check: Callable[[], Any], what: str = "the condition", timeout: float = 10.0,
          step: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; fail naming
    ``what`` once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)
