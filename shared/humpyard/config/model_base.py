"""What both halves of the configuration's schema build on.

``models.py`` (targets, routes, rules, sections, the whole file) and
``provider_models.py`` (providers, their endpoints and prices) import these;
this module imports neither, so there is no cycle.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

# An environment variable's name. The error never echoes the value: a key pasted
# where its variable's name belongs must not end up in logs or ``humpyard check``.
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class _Strict(BaseModel):
    # inf and nan are TOML numbers; no setting means either (an infinite price made
    # every budgeted request unaffordable, and /v1/config cannot show either as JSON)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
