"""Where a long-running process's log lines go: stderr, through a buffer.

``humpyard serve`` logs one line per request (``recording.py``). Python's
``StreamHandler`` flushes after every record, which is a system call per
request, and its ``Formatter`` formats the time afresh for every record; both
are a sizeable share of the gateway's own work per request
(docs/decisions/0003-performance.md, "Round 3"). ``BufferedStderr`` keeps lines
in a 64 KiB buffer that is handed on when it fills, at once for a WARNING or
worse, and by ``flush_periodically`` (every ``FLUSH_SECS``) and at exit, so an
INFO line reaches the log within a quarter of a second. What is handed on is
written by a thread of its own (``logpipe.py``), so a reader of stderr that stops
taking lines costs lines (dropped and counted), never the event loop's time.
``LineFormatter`` formats the time once per second.

Every log line is one record: ``EscapingFormatter`` (and ``LineFormatter``, built
on it) writes the control characters of a record's message (CR, LF and the rest
of C0, DEL, C1, and the Unicode line and paragraph separators) as escapes
(``\\n``, ``\\x1b``, ``\\u2028``), so a value that reaches a log line (an upstream's
error message, a client's model name) cannot start a line of its own. A
traceback keeps its lines, each indented, with its other control characters
escaped: a line that begins in the first column is always a record's first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from humpyard.logpipe import FdWriter

FLUSH_SECS = 0.25
BUFFER_BYTES = 64 * 1024
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_LF = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape_controls(text: str) -> str:
    """``text`` with its control characters written as escapes (one line, always)."""
    return _CONTROL.sub(_escape_one, text) if _CONTROL.search(text) else text


def _indent_block(text: str) -> str:
    """A traceback or stack: its lines kept, each indented, other controls escaped."""
    text = _CONTROL_BUT_LF.sub(_escape_one, text)
    return "\n".join("    " + line for line in text.split("\n"))


class EscapingFormatter(logging.Formatter):
    """A ``Formatter`` whose every record is one line (traceback lines indented)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802
        return _indent_block(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _indent_block(super().formatStack(stack_info))


class LineFormatter(EscapingFormatter):
    """``FORMAT``, escaped, with the time string computed once per second of wall time."""

    def __init__(self) -> None:
        super().__init__(FORMAT)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return self._time(record.created, int(record.msecs))

    def _time(self, created: float, msecs: int) -> str:
        second = int(created)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(created))
        return f"{self._stamp},{msecs:03d}"

    def line(self, created: float, levelname: str, name: str, message: str) -> str:
        """What ``format`` makes of a record with these fields and no exception or
        stack (``created`` in epoch seconds), without the record."""
        msecs = int((created - int(created)) * 1000)
        return f"{self._time(created, msecs)} {levelname} {name} {escape_controls(message)}"


class _Pending:
    """The text ``BufferedStderr`` holds (whole records), handed to its ``FdWriter`` as
    it reaches ``BUFFER_BYTES``; the handler's ``stream``."""

    __slots__ = ("parts", "size", "out")

    def __init__(self, out: FdWriter) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.out = out

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= BUFFER_BYTES:
            self.hand_off()

    def hand_off(self) -> None:
        if self.parts:
            text = "".join(self.parts)
            self.parts.clear()
            self.size = 0
            self.out.put(text)

    def flush(self) -> None:
        """Called by ``StreamHandler.emit`` after every record: nothing until a drain."""


class BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr (file descriptor 2) through a buffer and a writer thread (``logpipe``);
    see the module docstring."""

    def __init__(self, fd: int = 2) -> None:
        self.out = FdWriter(fd)
        super().__init__(_Pending(self.out))  # type: ignore[arg-type]
        self.setFormatter(LineFormatter())

    def flush(self) -> None:
        """Called by ``emit`` after every record: nothing to do until ``drain``."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if record.levelno >= logging.WARNING:
            self.drain()

    def drain(self) -> None:
        """Hand what the buffer holds to the writer thread; once a reader that stalled
        takes lines again, a WARNING says how many were dropped meanwhile."""
        with self.lock:  # type: ignore[union-attr]
            self.stream.hand_off()
        lost = self.out.take_dropped()
        if lost:
            logging.getLogger("humpyard.log").warning(
                "%d log lines were dropped: stderr took none for a while (its reader "
                "stalled, or its file's disk was full); see "
                "humpyard_log_lines_dropped_total", lost)

    def close(self) -> None:
        self.drain()
        self.out.wait_empty()
        super().close()

    def write_info(self, name: str, message: str) -> None:
        """An INFO line from logger ``name``, as ``emit`` writes it, without a record
        (``info_line``)."""
        formatter = self.formatter
        assert isinstance(formatter, LineFormatter)
        text = formatter.line(time.time(), "INFO", name, message) + self.terminator
        with self.lock:  # type: ignore[union-attr]
            self.stream.write(text)


def _only_plain_handler(logger: logging.Logger) -> BufferedStderr | None:
    """The ``BufferedStderr`` with a ``LineFormatter`` that is the only handler an INFO
    record from ``logger`` reaches, with no filter, record factory or disabling on
    the way that could change or stop it; else None."""
    if (logger.disabled or logger.filters or not logger.isEnabledFor(logging.INFO)
            or logging.getLogRecordFactory() is not logging.LogRecord):
        return None
    found: BufferedStderr | None = None
    node: logging.Logger | None = logger
    while node is not None:
        for h in node.handlers:
            if (found is not None or type(h) is not BufferedStderr or h.filters
                    or h.level > logging.INFO or type(h.formatter) is not LineFormatter):
                return None
            found = h
        node = node.parent if node.propagate else None
    return found


def info_line(logger: logging.Logger, msg: str, *args: object) -> None:
    """``logger.info(msg, *args)`` for a line written per request: when the record
    would reach only the plain ``BufferedStderr`` (``serve``'s own logging), the
    same line goes straight into its buffer, without the ``LogRecord`` and the
    handler chain (about a quarter of the cost, ADR 0003); any other logging set-up
    (JSON lines, a filter, another handler) gets the record as usual."""
    handler = _only_plain_handler(logger)
    if handler is None:
        logger.info(msg, *args)
    else:
        handler.write_info(logger.name, msg % args)


async def flush_periodically(handler: BufferedStderr) -> None:
    """Drain ``handler`` every ``FLUSH_SECS`` until cancelled (then once more)."""
    try:
        while True:
            await asyncio.sleep(FLUSH_SECS)
            handler.drain()
    finally:
        handler.drain()


def drain_all(*, wait: float = 0) -> None:
    """Drain every ``BufferedStderr`` the root logger has (a process without an event
    loop to run ``flush_periodically``, such as ``serve --workers``' parent, calls it
    as it goes; every process calls it at exit, with ``wait``: up to that many
    seconds for the lines to be written)."""
    for h in logging.getLogger().handlers:
        if isinstance(h, BufferedStderr):
            h.drain()
            if wait:
                h.out.wait_empty(wait)


_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName", "color_message"}  # the last: uvicorn's ANSI copy


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record, with the fields of the Lambda log lines
    (Powertools' ``Logger``, ``aws/log.py``): ``level``, ``location``
    (``function:line``), ``message``, ``timestamp`` (UTC, ``2026-12-02
    01:02:03,456+0000``), ``service``, every ``extra=`` field, and for an
    exception ``exception`` (the traceback) and ``exception_name``; plus
    ``logger``, the logger's name. ``json.dumps`` escapes control characters, so a
    line is always one line (``humpyard serve --log-format json``)."""

    def __init__(self, service: str = "humpyard") -> None:
        super().__init__()
        self.service = service
        self._second = -1
        self._stamp = ""

    def _timestamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.created))
        return f"{self._stamp},{int(record.msecs):03d}+0000"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "level": record.levelname,
            "location": f"{record.funcName}:{record.lineno}",
            "message": record.getMessage(),
            "timestamp": self._timestamp(record),
            "service": self.service,
            "logger": record.name,
        }
        for name, value in vars(record).items():
            if name not in _RECORD_FIELDS and name not in out:
                out[name] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = self.formatException(record.exc_info)
            out["exception_name"] = record.exc_info[0].__name__
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, default=str, separators=(",", ":"))


AWS_SDK_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")
"""Loggers ``setup_logging`` keeps at INFO or above whatever the level: their DEBUG
records carry AWS credentials (``X-Amz-Security-Token``) and every store item."""


def setup_logging(level: str = "INFO", *, buffered: bool = False,
                   json_lines: bool = False) -> None:
    """The ``humpyard`` command's logging: to stderr; ``buffered`` (the long-running
    commands) through ``BufferedStderr``, one JSON object per line with
    ``json_lines`` (``serve --log-format json``)."""
    if buffered:
        # The line format uses no thread or process name and no source file or
        # line: not collecting them (the logging HOWTO's "Optimization") makes each
        # record cheaper (docs/decisions/0003-performance.md). The JSON lines carry
        # the source location, as the Lambda lines do, so they keep collecting it.
        logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
        if not json_lines:
            logging._srcfile = None  # type: ignore[attr-defined]
        handler = BufferedStderr()
        if json_lines:
            handler.setFormatter(JsonLineFormatter())
        logging.basicConfig(level=level, handlers=[handler])
    else:
        plain = logging.StreamHandler()
        plain.setFormatter(EscapingFormatter(FORMAT))
        logging.basicConfig(level=level, handlers=[plain])
    # httpx logs every upstream call at INFO; the gateway logs its own line per request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # httpcore's DEBUG trace prints upstream response headers verbatim, and an
    # upstream may echo the provider key (or set cookies) in them.
    logging.getLogger("httpcore").setLevel(logging.INFO)
    # DEBUG is humpyard's own: the AWS SDK's DEBUG trace prints every signed request's
    # headers (the session token) and bodies, so it stays off at any --log-level.
    floor = max(logging.INFO, logging.getLevelName(level.upper()))
    for name in AWS_SDK_LOGGERS:
        logging.getLogger(name).setLevel(floor)


class Sampled:
    """Events of one kind logged at most once every ``every`` seconds of ``now()``:
    ``due()`` counts one and says how many to report in a line now, or 0 (a flood a
    client can send at will writes one line per period, not one per event)."""

    __slots__ = ("_now", "_every", "_unlogged", "_logged_at")

    def __init__(self, now: Callable[[], float], every: float) -> None:
        self._now = now
        self._every = every
        self._unlogged = 0
        self._logged_at = -every

    def due(self) -> int:
        self._unlogged += 1
        now = self._now()
        if now - self._logged_at < self._every:
            return 0
        n, self._unlogged, self._logged_at = self._unlogged, 0, now
        return n
