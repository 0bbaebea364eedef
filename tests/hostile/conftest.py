"""Fixtures of the hostile tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[False, True], ids=["uvicorn", "serve-protocol"])
def own_server(request: pytest.FixtureRequest) -> bool:
    """Run the test under uvicorn's own protocol, then under the one ``humpyard serve``
    runs (``running_gateway(own_server=True)``): a client's leaving is heard through
    ``receive()`` under the first, through the connection's loss under the second."""
    return bool(request.param)
