"""Client keys are matched in constant time.

Structurally (an AST check of ``humpyard/keys.py``): key material is compared
only with ``hmac.compare_digest``; the only ``==`` compares the auth scheme
with a literal; there is no ``in`` test and no early exit from the loop over
the configured keys. Behaviourally: every configured key is compared, on
SHA-256 digests of equal length, whether the presented key is the first,
the last or none of them.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import inspect

import pytest

from humpyard import keys
from humpyard.config.spec import KeySpec
from humpyard.errors import AuthError

TREE = ast.parse(inspect.getsource(keys))


def _function(name: str) -> ast.FunctionDef:
    found = [n for n in ast.walk(TREE) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return found[0]


def test_keys_are_compared_with_compare_digest_only() -> None:
    calls = [n for n in ast.walk(_function("authenticate")) if isinstance(n, ast.Call)]
    compared = [c for c in calls if isinstance(c.func, ast.Attribute)
                and c.func.attr == "compare_digest"
                and isinstance(c.func.value, ast.Name) and c.func.value.id == "hmac"]
    assert len(compared) == 1


def test_no_equality_or_membership_test_on_key_material() -> None:
    for node in ast.walk(TREE):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators, strict=True):
            assert not isinstance(op, ast.In | ast.NotIn), ast.unparse(node)
            if isinstance(op, ast.Eq | ast.NotEq):
                # only ever a comparison with a literal, such as the auth scheme
                literal = [x for x in (node.left, right)
                           if isinstance(x, ast.Constant) and isinstance(x.value, str)]
                assert literal, f"== on something other than a literal: {ast.unparse(node)}"


def test_the_loop_over_keys_never_exits_early() -> None:
    loops = [n for n in ast.walk(_function("authenticate")) if isinstance(n, ast.For)]
    assert len(loops) == 1
    for node in ast.walk(loops[0]):
        assert not isinstance(node, ast.Break | ast.Return | ast.Raise), ast.unparse(node)


def _keys(n: int) -> dict[str, KeySpec]:
    return {f"k{i}": KeySpec(id=f"k{i}", digest=hashlib.sha256(f"key-{i}".encode()).digest())
            for i in range(n)}


@pytest.mark.parametrize("presented,expected", [
    ("key-0", "k0"), ("key-6", "k6"), ("key-3", "k3"), ("nope", None)])
def test_every_configured_key_is_compared(monkeypatch, presented: str,
                                          expected: str | None) -> None:
    seen: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        seen.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    configured = _keys(7)
    if expected is None:
        with pytest.raises(AuthError):
            keys.authenticate(configured, {"authorization": f"Bearer {presented}"})
    else:
        found = keys.authenticate(configured, {"x-api-key": presented})
        assert found is not None and found.id == expected
    assert seen == [(32, 32)] * 7


def test_a_key_given_as_its_sha256_matches_like_one_from_the_environment() -> None:
    digest = bytes.fromhex(hashlib.sha256(b"the-key").hexdigest())
    found = keys.authenticate({"k": KeySpec(id="k", digest=digest)},
                              {"authorization": "Bearer the-key"})
    assert found is not None and found.id == "k"
    assert "the-key" not in repr(found) and digest.hex() not in repr(found)
