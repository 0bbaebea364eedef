"""``humpyard.redact``: what the executor runs every upstream error message through."""

from __future__ import annotations

import pytest

from humpyard.redact import REDACTED, redact

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"


def test_every_copy_is_replaced() -> None:
    text = f"Incorrect API key provided: Bearer {KEY}. You passed {KEY}!"
    assert redact(text, [KEY]) == (f"Incorrect API key provided: Bearer {REDACTED}. "
                                   f"You passed {REDACTED}!")


def test_a_copy_cut_off_at_the_end_is_replaced() -> None:
    assert redact("key was Bearer " + KEY[:12], [KEY]) == "key was Bearer " + REDACTED
    # fewer than 8 characters of it are too little to tell a key from a word
    assert redact("prefix sk-proj", [KEY]) == "prefix sk-proj"


@pytest.mark.parametrize("secrets", [[], [None], [""], ["abc"]])
def test_nothing_to_hide_changes_nothing(secrets: list[str | None]) -> None:
    assert redact("abc upstream answered 401 abc", secrets) == "abc upstream answered 401 abc"


def test_several_secrets_longest_first() -> None:
    short, long = "secret-1234", "secret-1234-and-more"
    assert redact(f"{long} {short}", [short, long]) == f"{REDACTED} {REDACTED}"


def test_text_without_the_secret_is_untouched() -> None:
    text = "upstream answered 500: the model is overloaded"
    assert redact(text, [KEY]) == text
