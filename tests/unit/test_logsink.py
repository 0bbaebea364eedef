"""``logsink``: every log record is one line, whatever its values hold."""

from __future__ import annotations

import logging
import sys

from humpyard.logsink import FORMAT, EscapingFormatter, LineFormatter, escape_controls


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
