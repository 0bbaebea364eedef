"""Paths are matched after exactly one decode, segment by segment (``http/app.py``)."""

from __future__ import annotations

import pytest
from starlette.routing import Route

from humpyard.http.app import named_by_segments, remainder_prefixes, route_table

REMAINDERS = remainder_prefixes(r for _, r in route_table())


def test_the_models_route_takes_the_rest_of_the_path() -> None:
    assert (b"v1", b"models") in REMAINDERS
    assert remainder_prefixes([Route("/a/{b}/{c:path}", lambda r: None)]) == ()


@pytest.mark.parametrize("raw, named", [
    (b"/v1/health", True),
    (b"/v1/models/auto", True),
    (b"/v1/models/org%2Fname", True),       # a model id holding a slash: one segment
    (b"/v1/models/org%2fname", True),
    (b"/v1%2Fhealth", False),                # not /v1/health
    (b"/v1%2fdecisions", False),
    (b"/v1%5Cconfig", False),
    (b"/v1%2Fmodels/auto", False),           # the fixed part written encoded
    (b"/v1/models/a/b%2Fc", False),          # the id would be two segments
    (b"/v1/chat%2Fcompletions", False),
    (b"/v1/overrides/1%2F..%2Fx", False),
])
def test_an_encoded_separator_is_never_a_separator(raw: bytes, named: bool) -> None:
    assert named_by_segments(raw, REMAINDERS) is named
