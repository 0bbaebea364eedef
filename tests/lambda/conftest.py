"""Fixtures for the Lambda tests: an isolated logging state and a clean AWS environment.

A Lambda instance configures the ``humpyard`` logger for Powertools (JSON
handler, no propagation). In the test process that must not outlive the
test, or later tests' ``caplog`` would stop seeing ``humpyard.*`` records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from lambda_support import SerialMotoServer

from tests.support.logging_state import isolated_humpyard_logging


@pytest.fixture(autouse=True)
def isolated_logging() -> Iterator[None]:
    with isolated_humpyard_logging():
        yield


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and a region; nothing from the developer's own AWS setup."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB",
                 "AWS_SESSION_TOKEN", "HUMPYARD_SECRETS_ARN", "HUMPYARD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("POWERTOOLS_LOG_DEDUPLICATION_DISABLED", "true")


@contextmanager
def _quiet_moto() -> Iterator[SerialMotoServer]:
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.WARNING)  # one line per DynamoDB call otherwise
    try:
        with SerialMotoServer() as server:
            yield server
    finally:
        werkzeug.setLevel(level)


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """One moto server on loopback for every test that needs processes to share DynamoDB."""
    with _quiet_moto() as server:
        yield server.url


@pytest.fixture(scope="module")
def moto() -> Iterator[SerialMotoServer]:
    """A moto server for the module (each module its own, so its call counts are its own)."""
    with _quiet_moto() as server:
        yield server
