"""Low-level AWS clients from botocore directly, without importing boto3.

``boto3.client(name)`` is botocore's ``create_client`` on boto3's default
session; importing boto3 also imports s3transfer, multiprocessing and the
resource layer, on every cold start, for nothing humpyard calls (the import
time saved is in docs/decisions/0003-performance.md, "Applied"). The clients
are the same low-level clients (their user agent says ``Botocore/…`` where
boto3's adds ``Boto3/…``). One botocore
session per process is shared, as boto3's default session is, so the
credentials and the endpoint data are resolved once.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def session() -> Any:
    """The botocore session every client below is created on (one per process)."""
    import botocore.session
    return botocore.session.get_session()


def client(service: str, **kwargs: Any) -> Any:
    """``boto3.client(service, **kwargs)`` without boto3: a botocore client."""
    return session().create_client(service, **kwargs)


def dynamodb_client() -> Any:
    """The DynamoDB client a ``DynamoDBStore`` is given, with botocore's own retries off.

    The store retries (through the injected clock) instead, so attempts are
    counted once. ``AWS_ENDPOINT_URL_DYNAMODB`` points it at an emulator.
    """
    from botocore.config import Config
    return client("dynamodb", config=Config(
        retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=5))
