"""Sampling profile of a running gateway with py-spy, summarised as text.

``record(pid, seconds, out)`` runs ``py-spy record --format raw`` (collapsed
stacks) and ``summarize`` turns them into two lists: inclusive share per frame
(where the time goes, callers included) and own share per frame (leaf). Idle
frames (the event loop's ``select``, a thread blocked on its queue) are
counted separately, so the shares are of *busy* samples.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

IDLE = ("select (selectors.py", "BackgroundWriter._loop (humpyard/store/writer.py:119)",
        "Condition.wait (threading.py", "_worker (concurrent/futures/thread.py")


def py_spy() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def record(pid: int, seconds: float, out: Path, rate: int = 500) -> str | None:
    """Record ``pid`` for ``seconds`` into ``out``; the error text, or None on success."""
    exe = py_spy()
    if exe is None:
        return "py-spy is not installed (`.venv/bin/pip install py-spy`)"
    res = subprocess.run([exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r",
                          str(rate), "-f", "raw", "-o", str(out)], capture_output=True,
                         text=True, timeout=seconds + 60)
    if res.returncode != 0 or not out.exists():
        return f"py-spy failed: {(res.stderr or res.stdout).strip()[-300:]}"
    return None


def summarize(raw: Path, top: int = 40) -> str:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    busy = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack:
            continue
        n = int(n_s)
        frames = stack.split(";")
        if any(frames[-1].startswith(i) or i in frames[-1] for i in IDLE):
            idle += n
            continue
        busy += n
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    if not busy:
        return "no busy samples\n"
    out = [f"busy samples: {busy}, idle samples: {idle} "
           f"(busy share {busy / (busy + idle):.0%})", "", "inclusive (% of busy samples):"]
    out += [f"{100 * n / busy:6.1f}%  {f}" for f, n in inclusive.most_common(top)]
    out += ["", "own time (% of busy samples):"]
    out += [f"{100 * n / busy:6.1f}%  {f}" for f, n in own.most_common(top // 2)]
    return "\n".join(out) + "\n"
