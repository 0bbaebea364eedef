"""Run a CPU-heavy in-process workload on a new thread, at the bottom of a fresh frame stack.

CPython 3.11 keeps a thread's Python frames in 16 KiB chunks and frees a chunk
(``munmap``) as soon as the frame at its base returns. A hot loop whose calls
cross a chunk boundary therefore maps and unmaps 16 KiB per call. Where the
boundaries fall depends on how deep the caller already is, and a test body under
pytest sits some 40 frames down, below the plugins' hooks. The partition-heat
runs over moto (deep recursion in its expression parser and ``deepcopy``) landed
on a boundary: 2 million ``mmap``/``munmap`` pairs, 56 s of system time, and a
run that takes 45 s as a script took 220 s in ``make test``. A new thread starts
its own stack at depth 0, as a process does.

Only the tests' workload is affected: the gateway serves at the depth its own
process gives it (a paced bench of 300 streams made 81 ``munmap`` calls in all).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def on_fresh_stack(work: Callable[[], T]) -> T:
    """``work()``'s result, computed on a new thread; its exception re-raised here."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed back to the caller as it was
            failure.append(exc)

    thread = threading.Thread(target=run, name="fresh-stack")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]
