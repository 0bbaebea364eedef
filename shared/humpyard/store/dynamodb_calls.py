"""Counting the DynamoDB calls a store makes: for tests, benchmarks and cost estimates.

``count_calls(client)`` wraps a boto3 client in a ``CallCounter``, a proxy
that forwards everything and counts each API call by its operation name
(``Query``, ``TransactWriteItems``, ...). Hand the proxy to
``DynamoDBStore(client=...)``; read ``counter.calls`` or take ``delta()``
around a request to see what it cost. Every attempt counts, retries
included, because every attempt is a request DynamoDB sees.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class CallCounter:
    """A boto3 client proxy that counts API calls per operation; thread-safe."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._names: dict[str, str] = dict(client.meta.method_to_api_mapping)
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        operation = self._names.get(name)
        if operation is None:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls[operation] += 1
            return attr(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        """Calls of every operation so far."""
        with self._lock:
            return sum(self.calls.values())

    def delta(self) -> Counter[str]:
        """The calls made since the last ``delta`` (or since creation), and start afresh."""
        with self._lock:
            taken = Counter(self.calls)
            self.calls.clear()
        return taken

    def reset(self) -> None:
        """Forget every count."""
        with self._lock:
            self.calls.clear()


def count_calls(client: Any) -> CallCounter:
    """``client`` wrapped for counting; a client that already counts is returned as is."""
    return client if isinstance(client, CallCounter) else CallCounter(client)
