"""Names the file's schema and the request path share, without pydantic.

``models.py`` (the pydantic schema, needed only to load a file) and the
planner both use these; keeping them here lets ``humpyard.config.spec`` and
``humpyard.planning`` import without building the schema models.
"""

from __future__ import annotations

from typing import Literal

FAILURE_CLASSES = (
    "overflow", "rate_limit", "timeout", "server_error", "connection", "forbidden", "unavailable",
)
# Request headers a selector rule may never match (refused at load, skipped at match time).
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})

PromptRange = dict[Literal["min", "max"], int]
