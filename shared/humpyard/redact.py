"""Keeping secrets out of text the gateway passes on.

An upstream's error message is shown to the client and stored in the
decision, and some upstreams echo the request's ``Authorization`` header in
it (``Incorrect API key provided: Bearer sk-...``). ``redact`` replaces the
secret wherever it occurs, including a copy cut short at the end of the text
(the gateway keeps only the head of a long error body).
"""

from __future__ import annotations

from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4  # shorter "keys" (placeholders such as "none") are left alone
MIN_TAIL_CHARS = 8  # a cut-off copy at the end is redacted from this many characters on


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each secret replaced by ``[redacted]``.

    A trailing fragment of at least ``MIN_TAIL_CHARS`` characters that is the
    start of a secret (a copy truncated by the caller) is replaced too.
    Secrets shorter than ``MIN_SECRET_CHARS`` are ignored. Never raises.
    """
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS},
                         key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
        text = _redact_tail(text, secret)
    return text


def _redact_tail(text: str, secret: str) -> str:
    longest = min(len(secret) - 1, len(text))
    for n in range(longest, MIN_TAIL_CHARS - 1, -1):
        if text.endswith(secret[:n]):
            return text[:-n] + REDACTED
    return text
