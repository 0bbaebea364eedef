"""A simulated OpenAI-compatible provider, for demos, tests and benchmarks.

``create_simulator_app`` builds the ASGI app, ``run_simulator`` serves it;
``humpyard.simulate.wire`` holds the OpenAI wire shapes it speaks. See
``humpyard.simulate.app`` for the profiles and routes.
"""

from humpyard.simulate.app import (
    PROFILES,
    Outcome,
    create_simulator_app,
    draw_outcome,
    run_simulator,
)

__all__ = ["PROFILES", "Outcome", "create_simulator_app", "draw_outcome", "run_simulator"]
