"""No one can forge a line in ``humpyard serve``'s log.

Issue 24, case 8: an upstream error message holding a newline was logged as is
and produced a fake request line. Here an upstream answers 500 with a message
that carries a whole forged request line after a newline (and after the other
line breakers: CR, NEL, the Unicode line separator), and the test reads what
the real CLI wrote.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.hostile.clients_support import MODEL, serving, wait_until
from tests.support.steps import status

FORGED = ("2026-01-01 00:00:00,000 INFO humpyard.request request request_id=FORGED "
          "route=t rule=- target=t provider=p status=200 ms=1.0 outcome=ok")
# A real record's first line starts with its timestamp; nothing else starts a line.
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def test_an_upstream_error_message_cannot_forge_a_log_line(tmp_path: Path) -> None:
    breakers = ("\n", "\r\n", "\r", "\x85", "\u2028", "\u2029", "\x1b[2K\r")
    with serving(tmp_path) as (gw, up):
        for br in breakers:
            up.script(status(500, {"error": {"message": f"boom{br}{FORGED}",
                                             "type": "server_error"}}))
            r = httpx.post(gw.url + "/v1/chat/completions", timeout=10,
                           json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code >= 500
        assert wait_until(lambda: gw.output().count("request failed") >= len(breakers), 5)
        text = gw.output()
    failed = [line for line in text.splitlines() if "request failed" in line]
    assert len(failed) == len(breakers), failed
    for line in failed:
        assert "FORGED" in line  # the message is there, escaped, on the record's own line
    forged = [line for line in re.split(r"\r\n|\r|\n|\x85|\u2028|\u2029", text)
              if "request_id=FORGED" in line and "request failed" not in line]
    assert not forged, forged
    lines = text.split("\n")
    assert all(RECORD.match(line) or line.startswith("    ") or not line for line in lines), \
        [line for line in lines if not (RECORD.match(line) or line.startswith("    "))][:5]
