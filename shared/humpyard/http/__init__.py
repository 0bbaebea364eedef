"""The HTTP surface: one Starlette app for ``humpyard serve``, Lambda and tests."""

from humpyard.http.app import create_app

__all__ = ["create_app"]
