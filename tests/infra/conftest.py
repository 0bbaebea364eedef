"""Fixtures for tests/infra: tests that start Lambda instances leave logging as they found it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.logging_state import isolated_humpyard_logging


@pytest.fixture(autouse=True)
def isolated_logging() -> Iterator[None]:
    with isolated_humpyard_logging():
        yield
