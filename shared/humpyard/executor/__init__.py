"""Walking a ``Plan``: attempts, failover, stream hold-back, re-sends."""
