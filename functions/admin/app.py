"""Lambda entry point: the admin API behind API Gateway with IAM auth (``AWS_IAM``).

``/v1/overrides*``, ``/v1/decisions*``, ``/v1/health``, ``/v1/config``,
``/v1/stats``, ``/v1/quota*``, ``/metrics`` and ``/ui*``: the template routes
only these paths here and signs callers with SigV4 at API Gateway; humpyard
keys (``[keys]``, ``manage_overrides``) still apply inside.

It serves the admin and console surfaces of the app's route table and nothing
else, and answers only events API Gateway signed off with IAM (the caller is
in the request context: ``aws/build.py`` ``boundary``). An override created
here is written to DynamoDB at once and honoured by every instance within one
``state_refresh_ms``. Built on the first invocation, reused while warm;
Mangum with ``lifespan="off"``.
"""

from __future__ import annotations

from typing import Any

from humpyard.aws.build import Instance, Once

SURFACES = ("admin", "console")  # http/app.py's route table; IAM-signed events only
_instance = Once(lambda: Instance.build(surfaces=SURFACES))


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """API Gateway REST proxy event in, proxy response out."""
    return _instance.get().http(event, context)
