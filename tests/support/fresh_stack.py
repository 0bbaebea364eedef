"""Run a CPU-heavy in-process workload on a new thread, at the bottom of a fresh frame stack.

CPython 3.11 keeps a thread's Python frames in 16 KiB chunks and frees a chunk
(``munmap``) as soon as the frame at its base returns. A hot loop whose calls
cross a chunk boundary therefore maps and unmaps 16 KiB per call. Where the
boundaries fall depends on how deep the caller already is, and a test body under
pytest sits 33 frames down, below the plugins' hooks. The partition-heat runs
over moto (deep recursion in its expression parser and ``deepcopy``) landed on a
boundary: at 150 requests, 2 million ``mmap``/``munmap`` pairs; at 600, 56 s of
system time, 122 s alone (220 s in ``make test``) against 45 s as a script. A
new thread starts its own stack near depth 0, as a process does.

Only the tests' workload is affected: the gateway serves at the depth its own
process gives it (a paced bench of 300 streams made 81 ``munmap`` calls in all).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def on_fresh_stack(work: Callable[[], T]) -> T:
    """``work()``'s result, computed on a new thread; its exception re-raised here."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fresh-stack") as pool:
        return pool.submit(work).result()
