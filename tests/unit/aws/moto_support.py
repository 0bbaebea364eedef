"""DynamoDB under moto for tests: tables, client proxies, and the contract factory.

moto's in-process backend does no locking, while DynamoDB makes every single
request atomic (a conditional write or an ``ADD`` never interleaves with
another on the same item). ``SerializedClient`` restores that guarantee by
running one call at a time, so concurrency tests exercise the store's own
logic and not the emulator's races. ``Recorder``, ``Failing`` and ``Gated``
are the other process edges tests need: what was asked of DynamoDB, DynamoDB
throttling or failing, and writes that land when the test says.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from humpyard.clock import FakeClock
from humpyard.store.dynamodb import DynamoDBStore, create_tables

STATE = "humpyard-state"
LEDGER = "humpyard-ledger"
REGION = "us-east-1"


class SerializedClient:
    """A boto3 client proxy that runs one API call at a time."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._api = set(client.meta.method_to_api_mapping)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self._api:
            return attr

        def serialized(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return serialized


def moto_client() -> Any:
    """A DynamoDB client for moto: fake credentials, AWS's own endpoint, no botocore retries."""
    return boto3.client(
        "dynamodb", region_name=REGION, aws_access_key_id="testing",
        aws_secret_access_key="testing", endpoint_url=f"https://dynamodb.{REGION}.amazonaws.com",
        config=Config(retries={"total_max_attempts": 1}))


@functools.cache
def _reused_client() -> Any:
    """One client for every ``moto_tables``: making a botocore client costs more than
    the tables (~0.1 s), and moto's stub answers it from whichever ``mock_aws`` is
    active, each of which starts empty."""
    return moto_client()


@contextmanager
def moto_tables() -> Iterator[SerializedClient]:
    """Inside ``mock_aws``: both tables created, and a serialising client on them."""
    with mock_aws():
        client = _reused_client()
        create_tables(client, STATE, LEDGER)
        yield SerializedClient(client)


@contextmanager
def dynamodb_store(tmp_path: Path, clock: FakeClock) -> Iterator[DynamoDBStore]:
    """The contract suite's factory: an empty ``DynamoDBStore`` on moto."""
    with moto_tables() as client:
        store = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
        try:
            yield store
        finally:
            store.close()


@contextmanager
def batched_dynamodb_store(tmp_path: Path, clock: FakeClock) -> Iterator[DynamoDBStore]:
    """An empty ``BatchedDynamoDBStore`` (``humpyard serve`` on DynamoDB) on moto."""
    from humpyard.store.dynamodb_batched import BatchedDynamoDBStore
    with moto_tables() as client:
        store = BatchedDynamoDBStore(STATE, LEDGER, clock=clock, client=client)
        try:
            yield store
        finally:
            store.close()


class Recorder:
    """A boto3 client proxy that records every API call as ``(operation, kwargs)``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._api: dict[str, str] = dict(client.meta.method_to_api_mapping)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        operation = self._api.get(name)
        if operation is None:
            return attr

        def recorded(**kwargs: Any) -> Any:
            self.calls.append((operation, kwargs))
            return attr(**kwargs)

        return recorded

    def operations(self) -> list[str]:
        return [op for op, _ in self.calls]


class Gated:
    """A boto3 client proxy whose calls of ``operations`` each wait for a pass
    (``let(n)``): the test decides when each write lands. ``landed`` counts those done."""

    def __init__(self, client: Any, operations: frozenset[str]) -> None:
        self._client = client
        self._api: dict[str, str] = dict(client.meta.method_to_api_mapping)
        self.operations = operations
        self._passes = threading.Semaphore(0)
        self.landed = 0

    def let(self, n: int = 1) -> None:
        self._passes.release(n)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        operation = self._api.get(name)
        if operation not in self.operations:
            return attr

        def gated(**kwargs: Any) -> Any:
            assert self._passes.acquire(timeout=30), f"{operation} never let through"
            try:
                return attr(**kwargs)
            finally:
                self.landed += 1

        return gated


class Failing:
    """A boto3 client proxy whose first ``times`` calls (of ``operations``, or any) raise
    ``ClientError`` with ``code`` and HTTP ``status``; later calls go through."""

    def __init__(self, client: Any, *, times: int, code: str = "ThrottlingException",
                 status: int = 400, operations: frozenset[str] | None = None,
                 reasons: list[str] | None = None) -> None:
        self._client = client
        self._api: dict[str, str] = dict(client.meta.method_to_api_mapping)
        self.remaining = times
        self.code, self.status, self.operations, self.reasons = code, status, operations, reasons

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        operation = self._api.get(name)
        if operation is None:
            return attr

        def maybe_failing(**kwargs: Any) -> Any:
            if self.remaining > 0 and (self.operations is None or operation in self.operations):
                self.remaining -= 1
                response: dict[str, Any] = {
                    "Error": {"Code": self.code, "Message": "injected"},
                    "ResponseMetadata": {"HTTPStatusCode": self.status}}
                if self.reasons is not None:
                    response["CancellationReasons"] = [{"Code": r} for r in self.reasons]
                raise ClientError(response, operation)  # type: ignore[arg-type]
            return attr(**kwargs)

        return maybe_failing
