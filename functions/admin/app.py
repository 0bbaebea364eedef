"""Lambda entry point: the admin API behind API Gateway with IAM auth (``AWS_IAM``).

``/v1/overrides*``, ``/v1/decisions*``, ``/v1/health``, ``/v1/config``,
``/v1/stats``, ``/v1/quota*``, ``/metrics`` and ``/ui*``: the template routes
only these paths here and signs callers with SigV4 at API Gateway; humpyard
keys (``[keys]``, ``manage_overrides``) still apply inside.

Same app as the ``gateway`` function, so an override created here is
written to DynamoDB at once and honoured by every instance within one
``state_refresh_ms``. Built on the first invocation, reused while warm;
Mangum with ``lifespan="off"``.
"""

from __future__ import annotations

from typing import Any

from humpyard.aws.build import Instance, Once

_instance = Once(Instance.build)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """API Gateway REST proxy event in, proxy response out."""
    return _instance.get().http(event, context)
