"""What one attempt sends and what a buffered answer gives (``executor/upstreams.py``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from humpyard import jsonfast


class Request(NamedTuple):
    """What one attempt sends: the body, headers beyond the provider's (or None),
    whether the body is the client's own (``native``), notes (or None), and the
    path when it depends on the request (Bedrock's ``/model/{id}/…``; None: the
    protocol's ``path``)."""

    payload: bytes
    headers: dict[str, str] | None
    native: bool
    notes: list[str] | None
    path: str | None = None


class Answer(NamedTuple):
    """A buffered answer read: the ``Served`` body, the bytes to send the client as
    they are (None when the body was translated), and the usage."""

    body: dict[str, Any]
    body_bytes: bytes | None
    usage: dict[str, Any]


def dumps(body: dict[str, Any]) -> bytes:
    return jsonfast.dumps_bytes(body)
