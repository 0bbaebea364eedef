"""Routes whose algorithm lives in ``nemo-switchyard`` (``stage_router``, ``llm_classifier``).

``switchyard.py`` is the one adapter the gateway calls; ``neutral.py`` and
``categories.py`` are pure helpers it uses; ``native.py`` is the only module
that imports ``switchyard``, and only when a tiered route is first used.
Importing this package never imports ``switchyard``.
"""
