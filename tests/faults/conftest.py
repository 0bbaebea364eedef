from __future__ import annotations

import pytest

from tests.support.fake_upstream import FakeUpstream


@pytest.fixture
def ups():
    """Three upstreams: ``a`` misbehaves, ``b`` is the fallback, ``h`` a bystander."""
    with FakeUpstream() as a, FakeUpstream() as b, FakeUpstream() as h:
        yield a, b, h
