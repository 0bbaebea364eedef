"""How a configuration problem is written: one path notation, a suggestion, no secrets.

Every message ``humpyard check``, ``serve`` and a reload print names the place
with the same notation (docs/configuration.md, "Checking a file"): TOML keys
joined by dots, a name quoted when TOML would quote it, list items as ``[i]``::

    routes.auto.fallback_on[0]
    targets."gpt-4.1".endpoints[1].provider
    select[2].route

An unknown key or name comes with the closest valid one (``falback_on`` →
``fallback_on``, a misspelt target → the configured target it resembles).
``schema_problems`` turns pydantic's errors into such lines; ``salvage`` drops
what failed the schema so the cross-reference checks can still run on the rest
and one run reports everything.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# What a suggested key is for, where a wrong guess would put a secret in the file.
_HINTS = {
    "api_key_env": "it names the environment variable that holds the key; the key itself "
                   "never goes in the file",
    "key_env": "it names the environment variable that holds the key; the key itself "
               "never goes in the file",
}
# Sections whose entries are named tables: a broken entry is dropped by name.
NAMED_SECTIONS = ("providers", "targets", "routes", "keys")
_SECRET_LOC = frozenset({"headers", "key_sha256", "key_env", "api_key_env"})


def path(*segments: str | int) -> str:
    """``segments`` in the one notation: ``targets."gpt-4.1".endpoints[0].price``."""
    out = ""
    for seg in segments:
        if isinstance(seg, int):
            out += f"[{seg}]"
            continue
        key = seg if _BARE_KEY.fullmatch(seg) else '"' + seg.replace("\\", "\\\\").replace(
            '"', '\\"') + '"'
        out += f".{key}" if out else key
    return out or "(top level)"


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` most likely misspells, or None when none is close."""
    import difflib  # only a configuration with a problem needs it
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str], what: str = "") -> str:
    """``; did you mean 'x'?`` when one choice is close, else the known ones (at most 12)."""
    names = sorted(set(choices))
    best = closest(word, names)
    if best is not None:
        hint = _HINTS.get(best)
        return f"; did you mean {best!r}?" + (f" ({hint})" if hint else "")
    if not names:
        return f" (no {what} is configured)" if what else ""
    shown = ", ".join(repr(n) for n in names[:12])
    more = f" and {len(names) - 12} more" if len(names) > 12 else ""
    return f" (known: {shown}{more})"


@dataclass
class Salvage:
    """What failed the schema and was left out of the cross-reference checks.

    A name in ``broken`` exists in the file but had a part that could not be
    read, so a reference to it is not reported as unknown (and checks that
    need the whole entry skip it); for a table that is not a section of named
    entries (``[store]``) it is a field that was given but could not be read,
    so it is not reported again as missing; ``select_index`` maps the remaining
    selector rules back to their place in the file.
    """

    broken: dict[str, set[str]] = field(default_factory=dict)
    whole: set[str] = field(default_factory=set)  # sections unreadable as a whole
    select_index: list[int] | None = None

    def exists(self, section: str, name: str) -> bool:
        """True when ``name`` was declared in ``section`` but (part of it) failed the schema."""
        return section in self.whole or name in self.broken.get(section, set())

    def any_broken(self, section: str) -> bool:
        return section in self.whole or bool(self.broken.get(section))

    def names(self, section: str, valid: Iterable[str]) -> set[str]:
        """Every name declared in ``section``: the valid ones and the broken ones."""
        return set(valid) | self.broken.get(section, set())

    def rule_index(self, position: int) -> int:
        return self.select_index[position] if self.select_index is not None else position

    def rule_broken(self, position: int) -> bool:
        return str(self.rule_index(position)) in self.broken.get("select", set())


def schema_problems(error: ValidationError, model: type[BaseModel],
                    prefix: Sequence[str | int] = ()) -> list[str]:
    """One line per pydantic error, in the one notation, with suggestions."""
    return [_format(e, model, tuple(prefix)) for e in error.errors()]


def _clean_loc(loc: Iterable[Any]) -> tuple[str | int, ...]:
    out: list[str | int] = []
    for seg in loc:
        if seg == "[key]":
            continue
        out.append("class" if seg == "class_" else seg)
    return tuple(out)


def _format(err: Mapping[str, Any], model: type[BaseModel], prefix: tuple[str | int, ...]) -> str:
    loc = _clean_loc(err.get("loc", ()))
    where = path(*prefix, *loc)
    kind = err.get("type")
    if kind == "extra_forbidden":
        allowed = _keys_at(model, loc[:-1])
        return f"{where}: unknown key" + (did_you_mean(str(loc[-1]), allowed) if loc else "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if kind == "missing":
        return f"{where}: required key is missing"
    got = err.get("input")
    if _SECRET_LOC & {str(seg) for seg in loc}:
        return f"{where}: {msg}"  # the value may be a key: never quoted
    if kind == "literal_error" and isinstance(got, str):
        options = _literals_at(model, loc)
        hint = did_you_mean(got, options) if closest(got, options) else ""
        return f"{where}: {msg} (got {got!r}){hint}"
    if kind and kind.endswith("_type") and got is not None and not isinstance(got, dict | list):
        # pydantic runs in strict mode: say what was given, e.g. a price as a string.
        return f"{where}: {msg}, not {_toml_type(got)} (got {got!r})"
    if "input" in err and not isinstance(got, dict | list) and not kind == "value_error":
        return f"{where}: {msg} (got {got!r})"
    return f"{where}: {msg}"


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _unwrap(tp: Any) -> Any:
    """``X | None`` → ``X``; ``Annotated[X, ...]`` → ``X``."""
    while True:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        elif hasattr(tp, "__metadata__"):
            tp = get_args(tp)[0]
        else:
            return tp


def _type_at(model: type[BaseModel], loc: Sequence[str | int]) -> Any:
    tp: Any = model
    for seg in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {(f.alias or name): f for name, f in tp.model_fields.items()}
            f = fields.get(str(seg)) or tp.model_fields.get(str(seg))
            if f is None:
                return None
            tp = f.annotation
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        elif get_origin(tp) is list:
            tp = get_args(tp)[0]
        else:
            return None
    return _unwrap(tp)


def _keys_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    tp = _type_at(model, loc)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


def _literals_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    tp = _type_at(model, loc)
    if get_origin(tp) is Literal:
        return [str(a) for a in get_args(tp)]
    return []


def salvage(data: dict[str, Any], error: ValidationError, info: Salvage) -> bool:
    """Remove from ``data`` (in place) the values ``error`` names; False if nothing changed.

    The value an error points at is removed (for a missing key, the table
    that lacks it; for a list item, the list: its other items keep their
    index), and the entry it belongs to is recorded in ``info``. Called again
    on the next error, this climbs until what is left is valid, so a typo in
    one key of a route still lets the route's target names be checked.
    """
    changed = False
    drop_rules: set[int] = set()
    for err in error.errors():
        loc = _clean_loc(err.get("loc", ()))
        if err.get("type") == "missing":
            loc = loc[:-1]
        while len(loc) > 2 and isinstance(loc[-1], int):
            loc = loc[:-1]
        if not loc:
            continue
        top = str(loc[0])
        if top != "select" and len(loc) >= 2:  # a named entry, or a table's field
            info.broken.setdefault(top, set()).add(str(loc[1]))
        if top == "select" and len(loc) >= 2 and isinstance(loc[1], int):
            info.broken.setdefault("select", set()).add(str(_position(info, loc[1])))
            if len(loc) == 2:
                drop_rules.add(loc[1])
                continue
        elif len(loc) == 1 and top in (*NAMED_SECTIONS, "select"):
            info.whole.add(top)
        changed = _remove(data, loc) or changed
    if drop_rules and isinstance(data.get("select"), list):
        rules = data["select"]
        kept = [i for i in range(len(rules)) if i not in drop_rules]
        data["select"] = [rules[i] for i in kept]
        info.select_index = [_position(info, i) for i in kept]
        changed = True
    return changed


def _position(info: Salvage, index: int) -> int:
    return info.select_index[index] if info.select_index is not None else index


def _remove(data: Any, loc: Sequence[str | int]) -> bool:
    """Delete the deepest value on ``loc`` that exists; True if something was deleted."""
    node = data
    parents: list[tuple[Any, str | int]] = []
    for seg in loc:
        if isinstance(node, dict) and seg in node:
            parents.append((node, seg))
            node = node[seg]
        elif isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
            parents.append((node, seg))
            node = node[seg]
        else:
            break
    while parents:
        container, key = parents.pop()
        if isinstance(container, dict):
            del container[key]
            return True
        # a list item: remove the list from its own container instead
    return False
