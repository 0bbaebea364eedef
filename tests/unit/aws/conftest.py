"""Fixtures for the AWS backends: moto tables, a counting client and a store on them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter, count_calls
from tests.unit.aws.moto_support import LEDGER, STATE, moto_tables


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client() -> Iterator[Any]:
    with moto_tables() as made:
        yield made


@pytest.fixture
def counted(client: Any) -> CallCounter:
    return count_calls(client)


@pytest.fixture
def store(counted: CallCounter, clock: FakeClock) -> Iterator[DynamoDBStore]:
    made = DynamoDBStore(STATE, LEDGER, clock=clock, client=counted)
    yield made
    made.close()
