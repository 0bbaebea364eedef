"""Validation helpers shared by the request decoders (pure).

Every refusal is a ``RequestError`` whose message starts with the field's
path (``messages[2].content[0].type: ...``), so a client can find what to fix.
What a translation cannot carry as sent is a ``Note``: the sentence the
decision records, with the kind of drop it is as a fixed label
(``humpyard_translation_drops_total{what}``, metrics/translation.py), set
where the note is written rather than read back from its wording.
``note`` keeps a decoder's notes free of repeats.
"""

from __future__ import annotations

from typing import Any, NoReturn

from humpyard.errors import RequestError


def fail(path: str, problem: str) -> NoReturn:
    """Refuse the request: ``RequestError("<path>: <problem>")``."""
    raise RequestError(f"{path}: {problem}")


class Note(str):
    """A translation note: the text the decision records (it is that ``str``) and its
    ``kind``, one of ``metrics.translation.KINDS``."""

    kind: str

    def __new__(cls, kind: str, text: str) -> Note:
        self = super().__new__(cls, text)
        self.kind = kind
        return self


def note(notes: list[str], kind: str, text: str) -> None:
    """Add the note ``text`` of ``kind`` to ``notes`` unless it is already there."""
    if text not in notes:
        notes.append(Note(kind, text))


def req_str(obj: dict, key: str, path: str) -> str:
    """``obj[key]`` as a string; refuses a missing or non-string value."""
    value = obj.get(key)
    if value is None:
        fail(f"{path}.{key}", "required")
    if not isinstance(value, str):
        fail(f"{path}.{key}", "must be a string")
    return value


def opt_str(obj: dict, key: str, path: str) -> str | None:
    """``obj[key]`` as a string, or None when absent or null."""
    return None if obj.get(key) is None else req_str(obj, key, path)


def number(body: dict, key: str, low: float, high: float, path: str | None = None
           ) -> float | None:
    """``body[key]`` as a number within ``[low, high]``, or None when absent."""
    value = body.get(key)
    if value is None:
        return None
    where = path or key
    if isinstance(value, bool) or not isinstance(value, int | float):
        fail(where, "must be a number")
    if not low <= value <= high:
        fail(where, f"must be between {low:g} and {high:g}, got {value}")
    return value


def positive_int(value: Any, path: str, limit: int) -> int:
    """A positive integer no larger than ``limit``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail(path, "must be a positive integer")
    if value > limit:
        fail(path, f"{value} is over the limit of {limit}")
    return value


def boolean(obj: dict, key: str, path: str) -> bool | None:
    """``obj[key]`` as a boolean, or None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        fail(path, "must be a boolean")
    return value


def block_type(block: Any, path: str) -> str:
    """The ``type`` of a content block (an object with a string ``type``)."""
    if not isinstance(block, dict):
        fail(path, "must be an object")
    return req_str(block, "type", path)
