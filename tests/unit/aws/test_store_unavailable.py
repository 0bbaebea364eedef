"""``DynamoDBStore`` failures by type: what is ``StoreUnavailable`` (may succeed later),
what is retried, and what answers 503 rather than 500.

A client proxy breaks the first calls of an operation the way the network does
(a connection the server closed as it was reused, a read timeout) or DynamoDB
does (throttling, a refused request); the tables are moto's.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from humpyard.clock import FakeClock
from humpyard.errors import StoreError, StoreUnavailable
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter
from tests.unit.aws.moto_support import LEDGER, STATE, Failing

URL = "http://dynamodb.test/"


class Broken:
    """A client proxy whose first ``times`` calls of ``operation`` raise ``error()``."""

    def __init__(self, client: Any, operation: str, error: Any, times: int = 1) -> None:
        self._client, self._operation, self._error = client, operation, error
        self.remaining = times

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != self._operation:
            return attr

        def broken(**kwargs: Any) -> Any:
            if self.remaining > 0:
                self.remaining -= 1
                raise self._error()
            return attr(**kwargs)
        return broken


def closed() -> ConnectionClosedError:
    return ConnectionClosedError(endpoint_url=URL)


def timed_out() -> ReadTimeoutError:
    return ReadTimeoutError(endpoint_url=URL)


def store_on(client: Any, clock: FakeClock) -> tuple[DynamoDBStore, CallCounter]:
    counted = CallCounter(client)
    return DynamoDBStore(STATE, LEDGER, clock=clock, client=counted), counted


def test_a_read_on_a_connection_the_server_closed_is_asked_again(
        client: Any, clock: FakeClock) -> None:
    """Before: the first reset failed the read (a purge, a listing, the shared view)."""
    store, counted = store_on(Broken(client, "batch_get_item", closed), clock)
    assert store.get_spend("k", "day:1") == 0.0
    assert counted.calls["BatchGetItem"] == 2  # the one reset, and the one answered


def test_a_write_whose_answer_was_lost_is_not_sent_again(client: Any,
                                                         clock: FakeClock) -> None:
    """An ADD may have landed before its connection broke: sending it again could count
    it twice, so it fails at once, as ``StoreUnavailable`` (the ledger writer keeps it)."""
    store, counted = store_on(Broken(client, "update_item", closed), clock)
    with pytest.raises(StoreUnavailable):
        store.add_spend("k", "day:1", 0.5)
    assert store.get_spend("k", "day:1") == 0.0


def test_a_read_timeout_is_not_waited_for_again(client: Any, clock: FakeClock) -> None:
    store, _ = store_on(Broken(client, "batch_get_item", timed_out, times=1), clock)
    with pytest.raises(StoreUnavailable) as raised:
        store.get_spend("k", "day:1")
    assert "Read timeout" in str(raised.value)


def test_throttling_past_the_retries_is_unavailable_and_a_refusal_is_not(
        client: Any, clock: FakeClock) -> None:
    throttled = DynamoDBStore(STATE, LEDGER, clock=clock,
                              client=Failing(client, times=4, code="ThrottlingException"))
    with pytest.raises(StoreUnavailable) as raised:
        throttled.get_spend("k", "day:1")
    assert (raised.value.status, raised.value.code) == (503, "store_unavailable")
    refused = DynamoDBStore(STATE, LEDGER, clock=clock,
                            client=Failing(client, times=1, code="ValidationException"))
    with pytest.raises(StoreError) as raised_too:
        refused.get_spend("k", "day:1")
    assert not isinstance(raised_too.value, StoreUnavailable)
    assert (raised_too.value.status, raised_too.value.code) == (500, "store_error")
