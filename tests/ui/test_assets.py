"""``humpyard.http.ui``: what ``/ui`` and ``/ui/{asset}`` serve, without a browser."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from humpyard.http import ui

STATIC = Path(ui.__file__).resolve().parents[1] / "static"


@pytest.fixture
def client():
    with TestClient(Starlette(routes=ui.routes())) as c:
        yield c


def test_page_loads_without_a_key_and_with_a_strict_policy(client):
    r = client.get("/ui")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.content == (STATIC / "console.html").read_bytes()
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(("name", "content_type"), [
    ("console.js", "text/javascript; charset=utf-8"),
    ("views.js", "text/javascript; charset=utf-8"),
    ("usage.js", "text/javascript; charset=utf-8"),
    ("console.css", "text/css; charset=utf-8"),
])
def test_assets_have_their_content_type(client, name, content_type):
    r = client.get(f"/ui/{name}")
    assert r.status_code == 200
    assert r.headers["content-type"] == content_type
    assert r.content == (STATIC / name).read_bytes()


def test_etag_answers_304(client):
    r = client.get("/ui/console.js")
    again = client.get("/ui/console.js", headers={"if-none-match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize("path", [
    "/ui/..%2Fhttp%2Fui.py", "/ui/..%2F..%2Fpyproject.toml", "/ui/%2e%2e", "/ui/.hidden.js",
    "/ui/nope.js", "/ui/__init__.py", "/ui/console.html", "/ui/..\\ui.py",
    "/ui/%2Fetc%2Fpasswd",
])
def test_nothing_outside_the_listing_is_served(client, path):
    assert client.get(path).status_code == 404


def test_files_are_read_once(tmp_path):
    (tmp_path / "console.html").write_text("<p>one</p>")
    (tmp_path / "app.js").write_text("1")
    (tmp_path / "notes.txt").write_text("not served")
    with TestClient(Starlette(routes=ui.routes(ui.Assets(tmp_path)))) as c:
        assert c.get("/ui").text == "<p>one</p>"
        (tmp_path / "console.html").write_text("<p>two</p>")
        (tmp_path / "late.js").write_text("2")
        assert c.get("/ui").text == "<p>one</p>"
        assert c.get("/ui/app.js").text == "1"
        assert c.get("/ui/late.js").status_code == 404
        assert c.get("/ui/notes.txt").status_code == 404


def test_scripts_never_write_markup():
    for name in ("console.js", "views.js", "usage.js"):
        text = (STATIC / name).read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, f"{name} uses {sink}"
        assert len(text.splitlines()) < 600, f"{name} is over 600 lines"
