"""``FdWriter``: lines to a pipe from a thread of its own, over real pipes."""

from __future__ import annotations

import fcntl
import os
import time

from humpyard.logpipe import FdWriter
from humpyard.metrics.registry import Metrics

F_SETPIPE_SZ = 1031


def _pipe(size: int = 4096) -> tuple[int, int]:
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, size)
    return r, w


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return out
        if not data:
            return out
        out += data


def test_a_reader_that_stalls_costs_whole_lines_never_a_wait() -> None:
    r, w = _pipe()
    counter = Metrics().counter("humpyard_log_lines_dropped_total", "dropped")
    out = FdWriter(w, bound=64 * 1024)
    out.counter = counter
    line = "x" * 99 + "\n"
    began = time.monotonic()
    for _ in range(100):
        out.put(line * 100)  # 10 KB at a time, 1 MB in all, to a 4 KB pipe nobody reads
    assert time.monotonic() - began < 1.0  # nothing waited for the reader
    assert out.dropped > 0 and out.dropped % 100 == 0  # whole puts, so whole lines
    assert counter.value() == out.dropped
    assert out.take_dropped() == 0  # still full: nothing to report yet
    assert not out.wait_empty(0.2)
    got = b""
    deadline = time.monotonic() + 10
    while not out.wait_empty(0.05) and time.monotonic() < deadline:
        got += _read_all(r)
    got += _read_all(r)
    kept = got.split(b"\n")
    assert kept[-1] == b"" and all(x == line[:-1].encode() for x in kept[:-1])
    assert len(kept) - 1 + out.dropped == 100 * 100
    assert out.take_dropped() == out.dropped  # the reader is back: reported once
    assert out.take_dropped() == 0
    os.close(r)
    os.close(w)


def test_an_exit_waits_once_for_a_reader_that_never_comes() -> None:
    r, w = _pipe()
    out = FdWriter(w)
    out.put(("y" * 99 + "\n") * 200)  # 20 KB: more than the pipe holds
    began = time.monotonic()
    assert not out.wait_empty(0.3)
    assert not out.wait_empty(30)  # gave up once: the next wait does not wait again
    assert time.monotonic() - began < 5
    os.close(r)
    os.close(w)


def test_a_closed_reader_drops_and_counts_the_rest() -> None:
    r, w = _pipe()
    os.close(r)
    out = FdWriter(w)
    out.put("a\nb\n")
    assert out.wait_empty(5)  # EPIPE: nothing more is taken, nothing waits
    out.put("c\n")
    assert out.dropped == 3
    os.close(w)


def test_a_non_blocking_stderr_that_fills_is_waited_for_on_the_thread() -> None:
    """A parent may hand the process a stderr pipe set O_NONBLOCK (it is shared with
    the parent's own descriptor): a full pipe is then EAGAIN, not a wait. That was
    taken for a reader gone, and every line after it dropped."""
    r, w = _pipe()
    os.set_blocking(w, False)
    out = FdWriter(w)
    out.put(("z" * 99 + "\n") * 200)  # 20 KB through a 4 KB pipe
    got = b""
    deadline = time.monotonic() + 10
    while got.count(b"\n") < 200 and time.monotonic() < deadline:
        got += _read_all(r)
        time.sleep(0.01)
    assert got.count(b"\n") == 200 and out.dropped == 0
    os.close(r)
    os.close(w)


def test_a_line_longer_than_the_queue_goes_out_when_nothing_waits() -> None:
    """One put larger than the whole queue (a long traceback, a large record) was
    dropped even with the queue empty and the reader keeping up; it now goes out
    whole when nothing else is waiting, and only then: a second one behind it,
    while the first is still queued, is dropped and counted as before."""
    r, w = _pipe(1 << 16)
    out = FdWriter(w, bound=4096)
    big = ("y" * 9_999 + "\n") * 10  # 100 KB: 25 times the queue's bound
    out.put(big)
    out.put(big)  # the first is still being written (a 64 KB pipe nobody read yet)
    got = b""
    deadline = time.monotonic() + 10
    while not out.wait_empty(0.05) and time.monotonic() < deadline:
        got += _read_all(r)
    got += _read_all(r)
    assert got == big.encode()
    assert out.dropped == 10
    os.close(r)
    os.close(w)
