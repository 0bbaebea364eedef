"""The log's way out: a thread that writes to stderr, so no caller ever waits for it.

stderr is a pipe more often than not (journald, a container runtime, a log
shipper, a terminal paused with Ctrl-S), and a pipe whose reader stops taking
lines blocks the writer once its buffer (64 KiB) is full. ``BufferedStderr``
(``logsink.py``) hands whole lines to ``FdWriter.put``, which queues them and
returns at once; one daemon thread writes the queue to the file descriptor. The
queue holds at most ``QUEUE_BYTES`` (or one larger put, when nothing else
waits): text that does not fit is dropped, whole lines at a time, and counted
(``dropped``, and a counter the server registers:
``humpyard_log_lines_dropped_total``), so a stalled reader costs lines, never
the event loop's time. ``wait_empty`` bounds how long an exit waits for the
queue to drain (``EXIT_WAIT_SECS``). A file descriptor that fails (stderr
closed: ``EPIPE``) takes nothing more (a full one set ``O_NONBLOCK`` by whoever
handed it over is waited for on the thread, as a blocking one is); what is
queued and put after is dropped and counted the same way. A write to a file
whose disk is full or failing (``ENOSPC``, ``EFBIG``, ``EIO``) loses only the
lines it held, dropped and counted the same way; the next are tried as ever.
"""

from __future__ import annotations

import errno
import os
import select
import threading
from collections import deque
from typing import Any

QUEUE_BYTES = 1 << 20
"""The most log text waiting for the reader: at ~230 bytes a request line, the lines
of ~4,500 requests, several seconds of a busy gateway."""

EXIT_WAIT_SECS = 5.0
"""How long an exit waits for the reader to take what is queued."""


class FdWriter:
    """Whole lines to a file descriptor from a thread of its own; see the module."""

    def __init__(self, fd: int, bound: int = QUEUE_BYTES) -> None:
        self._fd = fd
        self._bound = bound
        self._queue: deque[bytes] = deque()
        self._queued = 0  # bytes put and not yet written (the one being written too)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._gave_up = False  # an exit's wait ran out: later waits do not wait again
        self.dropped = 0  # lines dropped, ever
        self._unreported = 0  # lines dropped since the last ``take_dropped``
        self._taking = True  # the last write went through (not a full disk's failure)
        self.counter: Any = None  # a metrics Counter to count dropped lines in, if any

    def put(self, text: str) -> None:
        """Queue ``text`` (whole lines) to be written, or drop and count it; never waits
        for the reader."""
        data = text.encode("utf-8", "backslashreplace")
        with self._cond:
            # Past the bound only with something already waiting: one put larger than
            # the whole queue (a long traceback) still goes out when nothing is ahead.
            if self._failed or (self._queued and self._queued + len(data) > self._bound):
                lost = data.count(b"\n")
                self.dropped += lost
                self._unreported += lost
            else:
                self._queue.append(data)
                self._queued += len(data)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="humpyard-log",
                                                    daemon=True)
                    self._thread.start()
                self._cond.notify()
                return
        if lost and self.counter is not None:
            self.counter.inc(lost)

    def take_dropped(self) -> int:
        """Lines dropped since the last call, once the queue has room again and a write
        has gone through since (the reader is back, the disk has room); 0 until then or
        when nothing was dropped (a report while the disk is still full would be lost
        with the lines it counts)."""
        with self._cond:
            if (not self._unreported or self._failed or not self._taking
                    or self._queued > self._bound // 2):
                return 0
            n, self._unreported = self._unreported, 0
            return n

    def wait_empty(self, timeout: float = EXIT_WAIT_SECS) -> bool:
        """Wait until everything queued is written, at most ``timeout`` seconds (none
        once a wait has run out: the reader is not coming back for this exit)."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._queued == 0 or self._failed,
                                       0 if self._gave_up else timeout)
            self._gave_up = not done
            return done

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                data = self._queue.popleft()
            try:
                view = memoryview(data)
                while view:
                    try:
                        view = view[os.write(self._fd, view):]
                    except BlockingIOError:  # a stderr set O_NONBLOCK: full, not gone
                        select.select([], [self._fd], [], 1.0)
            except OSError as exc:
                if isinstance(exc, BrokenPipeError) or exc.errno == errno.EBADF:
                    self._fail(data)  # stderr is gone: it takes nothing more
                else:  # a full or failing disk (ENOSPC, EFBIG, EIO): these lines only
                    self._drop(data)
                continue
            with self._cond:
                self._queued -= len(data)
                self._taking = True
                self._cond.notify_all()

    def _drop(self, data: bytes) -> None:
        """``data`` could not be written (the file's disk is full or failed): dropped and
        counted; the lines after it are tried as ever."""
        lost = data.count(b"\n")
        with self._cond:
            self._queued -= len(data)
            self.dropped += lost
            self._unreported += lost
            self._taking = False
            self._cond.notify_all()
        if lost and self.counter is not None:
            self.counter.inc(lost)

    def _fail(self, data: bytes) -> None:
        """The descriptor takes no more: ``data`` (being written) and what is queued
        are dropped and counted."""
        with self._cond:
            lost = data.count(b"\n") + sum(d.count(b"\n") for d in self._queue)
            self._queue.clear()
            self._queued = 0
            self._failed = True
            self.dropped += lost
            self._cond.notify_all()
        if lost and self.counter is not None:
            self.counter.inc(lost)
