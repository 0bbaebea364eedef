"""Lambda entry point: the buffered client API behind API Gateway (REST, proxy events).

``/v1/models``, ``/v1/route/explain``, ``/v1/messages/count_tokens`` and every
path no other function claims (so unknown paths get humpyard's JSON 404).
Chat and messages are served by the ``stream`` function, admin paths by
``admin`` (IAM-protected). All three run the same Starlette app, each with
only its own surfaces of the route table: this one serves the client paths
alone, so ``/v1%2Fhealth`` or any other spelling of an admin path is a 404
here.

The instance (DynamoDB store, shared health and latency, the app under
Mangum with ``lifespan="off"``) is built on the first invocation and reused
while warm; every response waits for its ledger writes before it is returned,
and its metrics are printed as EMF when due (``aws/emission.py``).
Configuration: ``humpyard.aws.env.LambdaEnv``.
"""

from __future__ import annotations

from typing import Any

from humpyard.aws.build import Instance, Once

SURFACES = ("client",)  # http/app.py's route table: never an admin path, however encoded
_instance = Once(lambda: Instance.build(surfaces=SURFACES))


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """API Gateway REST proxy event in, proxy response out."""
    return _instance.get().http(event, context)
