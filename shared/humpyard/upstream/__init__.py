"""Calling upstreams: the HTTP client, error classification and never-delivered re-sends."""
