"""``GET /ui``: the operator console, plain files from ``humpyard/static``.

The page and its assets load without a key; every API call the page makes
carries the key the operator types into it, so nothing here authenticates.
The files are read once, on first use, and kept in memory with their
content type and an ETag. ``/ui/{asset}`` serves only names found in that
directory listing, so no request path ever reaches the file system.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from humpyard.errors import HumpyardError
from humpyard.http.errors import error_response

PAGE = "console.html"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
# The page runs only its own files and talks only to its own origin.
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


@dataclass(frozen=True, slots=True)
class Asset:
    """One static file as served: its bytes, content type and strong ETag."""

    body: bytes
    content_type: str
    etag: str


class Assets:
    """The files of one static directory, loaded together on first use.

    Only regular files with a known extension (``CONTENT_TYPES``) and a name
    not starting with a dot are served; ``get`` is a dictionary lookup.
    Thread-safe.
    """

    def __init__(self, root: Traversable | None = None) -> None:
        self._root = root
        self._files: dict[str, Asset] | None = None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Asset]:
        root = self._root or resources.files("humpyard").joinpath("static")
        files: dict[str, Asset] = {}
        for entry in root.iterdir():
            name = entry.name
            suffix = name[name.rfind("."):] if "." in name else ""
            if name.startswith(".") or suffix not in CONTENT_TYPES or not entry.is_file():
                continue
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            files[name] = Asset(body, CONTENT_TYPES[suffix], etag)
        return files

    def get(self, name: str) -> Asset | None:
        """The file called ``name`` in the directory, or None."""
        if self._files is None:
            with self._lock:
                if self._files is None:
                    self._files = self._load()
        return self._files.get(name)


def _serve(request: Request, asset: Asset, headers: dict[str, str] | None = None) -> Response:
    common = {"etag": asset.etag, "cache-control": "no-cache",
              "x-content-type-options": "nosniff", **(headers or {})}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=common)
    return Response(asset.body, headers=common, media_type=asset.content_type)


def _missing(what: str) -> Response:
    return error_response(HumpyardError(f"no such console file: {what}", status=404,
                                        code="not_found"))


def routes(assets: Assets | None = None) -> list[Route]:
    """``GET /ui`` (the page) and ``GET /ui/{asset}`` (its scripts and styles)."""
    files = assets or Assets()

    async def page(request: Request) -> Response:
        asset = files.get(PAGE)
        if asset is None:
            return _missing(PAGE)
        return _serve(request, asset, PAGE_HEADERS)

    async def static(request: Request) -> Response:
        name = request.path_params["asset"]
        asset = files.get(name) if name != PAGE else None
        if asset is None:
            return _missing(name)
        return _serve(request, asset)

    return [Route("/ui", page, methods=["GET"]),
            Route("/ui/{asset}", static, methods=["GET"])]
