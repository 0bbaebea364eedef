"""Structured JSON logs in Lambda: one Powertools ``Logger`` per instance.

Powertools names its logger after the service, so with the default service
``humpyard`` every ``humpyard.*`` logger (requests, health transitions,
unsaved store writes) is its child and writes JSON lines through it. For any
other service name its handler is also put on the ``humpyard`` logger.

The correlation id of each line is the humpyard request id (the
``x-humpyard-request-id`` response header); ``flush.FlushMiddleware`` sets
and clears it around each request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_lambda_powertools.logging import Logger

PACKAGE_LOGGER = "humpyard"


def lambda_logger(service: str) -> Logger:
    """The instance's logger; ``humpyard.*`` records go out through its JSON handler.

    The level comes from ``POWERTOOLS_LOG_LEVEL`` (default INFO). Calling it
    again for the same service reuses the configured logger.
    """
    from aws_lambda_powertools.logging import Logger

    logger = Logger(service=service)
    if service != PACKAGE_LOGGER:
        pkg = logging.getLogger(PACKAGE_LOGGER)
        if logger.registered_handler not in pkg.handlers:
            pkg.addHandler(logger.registered_handler)
        pkg.setLevel(logger.log_level)
        pkg.propagate = False
    # One line per request, carrying the correlation id: cheap next to a Lambda
    # invocation, and what CloudWatch Logs Insights queries start from.
    logging.getLogger("humpyard.request").setLevel(logging.DEBUG)
    return logger
