"""``logsink``: every log record is one line, whatever its values hold."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Any

from humpyard.logsink import (
    FORMAT,
    BufferedStderr,
    EscapingFormatter,
    JsonLineFormatter,
    LineFormatter,
    escape_controls,
    info_line,
)


def record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("bad\nFORGED 2026-01-01 INFO humpyard.request request")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("humpyard.request", logging.WARNING, __file__, 1, msg, args, info)


def test_control_characters_are_escaped() -> None:
    assert escape_controls("a\nb\rc\td\x00e\x1bf\x7fg\x85h\x9fi\u2028j\u2029k") == (
        "a\\nb\\rc\\td\\x00e\\x1bf\\x7fg\\x85h\\x9fi\\u2028j\\u2029k")
    assert escape_controls("plain ascii and ünïcödé") == "plain ascii and ünïcödé"


def test_a_value_with_line_breaks_stays_on_its_record_line() -> None:
    for fmt in (EscapingFormatter(FORMAT), LineFormatter()):
        out = fmt.format(record("error=%s", "boom\r\nINFO forged\u2028line"))
        assert "\n" not in out and "\r" not in out and "\u2028" not in out
        assert out.endswith("error=boom\\r\\nINFO forged\\u2028line")


def test_a_traceback_keeps_its_lines_indented() -> None:
    out = LineFormatter().format(record("failed", exc=True))
    first, *rest = out.split("\n")
    assert first.endswith("WARNING humpyard.request failed")
    assert rest and all(line.startswith("    ") for line in rest), rest
    assert any("Traceback" in line for line in rest)


FORGING = ["plain", "boom\r\nINFO forged\u2028line", "tab\tnul\x00esc\x1b del\x7f c1\x85",
           "ünïcödé ☃", "%s kept as text", ""]


def test_line_is_what_format_makes_of_the_record() -> None:
    """``LineFormatter.line`` (``info_line``'s text) against ``format`` of a real record,
    over many records (their milliseconds vary) and at the edges of a second."""
    fmt = LineFormatter()
    for i in range(3000):
        value = FORGING[i % len(FORGING)]
        rec = logging.LogRecord("humpyard.request", logging.INFO, __file__, 1,
                                "request x=%s n=%d", (value, i), None)
        if i % 500 == 0:  # the edges, with the record's own milliseconds rule
            rec.created = 1_700_000_000 + (0.9999, 0.0, 0.0005, 0.999)[i // 500 % 4]
            rec.msecs = (rec.created - int(rec.created)) * 1000
        assert fmt.line(rec.created, rec.levelname, rec.name, rec.getMessage()) == \
            fmt.format(rec)


def _root_to(tmp_path: Any, formatter: logging.Formatter | None = None) -> Any:
    """The root logger's only handler a ``BufferedStderr`` on a new file; the
    function returned puts the old handlers back and gives the file's lines."""
    out = tmp_path / f"log{len(list(tmp_path.iterdir()))}"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    handler = BufferedStderr(fd)
    if formatter is not None:
        handler.setFormatter(formatter)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)

    def lines() -> list[str]:
        handler.drain()
        assert handler.out.wait_empty(5)  # written by the log's own thread (logpipe.py)
        root.handlers[:] = handlers
        root.setLevel(level)
        os.close(fd)
        return out.read_text().splitlines()
    return lines


def test_info_line_writes_the_line_logging_writes(tmp_path: Any) -> None:
    lines = _root_to(tmp_path)
    log = logging.getLogger("humpyard.test.infoline")
    for value in FORGING:
        info_line(log, "request id=%s ms=%.1f", value, 12.345)
        log.info("request id=%s ms=%.1f", value, 12.345)
    got = lines()
    assert len(got) == 2 * len(FORGING)
    stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
    for fast, slow in zip(got[::2], got[1::2], strict=True):
        assert stamp.match(fast) and stamp.match(slow)
        assert fast[24:] == slow[24:]
        assert fast[24:].startswith("INFO humpyard.test.infoline request id=")


def test_info_line_takes_the_logging_path_for_any_other_set_up(tmp_path: Any) -> None:
    """A filter, a second handler, a level, JSON lines: each sees the record as
    ``logger.info`` would hand it over."""
    log = logging.getLogger("humpyard.test.infoline2")
    lines = _root_to(tmp_path)
    dropped: list[str] = []

    def drop(record: logging.LogRecord) -> bool:
        dropped.append(record.getMessage())
        return False
    log.addFilter(drop)
    info_line(log, "a=%s", 1)
    log.removeFilter(drop)
    seen: list[logging.LogRecord] = []
    extra = logging.Handler()
    extra.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger("humpyard.test").addHandler(extra)
    info_line(log, "b=%s", 2)
    logging.getLogger("humpyard.test").removeHandler(extra)
    log.setLevel(logging.WARNING)
    info_line(log, "c=%s", 3)
    log.setLevel(logging.NOTSET)
    got = lines()
    assert dropped == ["a=1"]
    assert [r.getMessage() for r in seen] == ["b=2"]
    assert len(got) == 1 and got[0].endswith("INFO humpyard.test.infoline2 b=2")

    lines = _root_to(tmp_path, JsonLineFormatter())
    info_line(log, "d=%s", 4)
    (only,) = lines()
    assert json.loads(only)["message"] == "d=4"
