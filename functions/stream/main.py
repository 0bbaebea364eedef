"""The streaming function's ASGI app, served by uvicorn under the Lambda Web Adapter.

``run.sh`` starts ``uvicorn --factory main:create_app``: the factory runs
once when the process starts (the Lambda INIT phase), never at import. The
adapter turns API Gateway's ``response-streaming-invocations`` into HTTP
requests to uvicorn and streams the answer back as it is produced, so
``stream: true`` chat and messages reach the client token by token (and a
buffered answer works too). Every response waits for its ledger writes and
hands its metrics to the instance's EMF cadence before its last chunk
(``aws/emission.py``; what is still waiting is printed at shutdown).
"""

from __future__ import annotations

from typing import Any

from humpyard.aws.build import Instance

SURFACES = ("client",)  # http/app.py's route table: never an admin path, however encoded


def create_app() -> Any:
    """Build the instance and return its flushed app (called once by uvicorn)."""
    return Instance.build(surfaces=SURFACES).asgi_app()
