"""The operator console in a real browser: Debian's Chromium driven by Playwright.

``console_gateway`` serves the real gateway (with the ``/ui`` routes) on
loopback; ``page`` is a fresh browser context and tab per test, 1280 px
wide, that fails the test on any uncaught script error.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from humpyard.clock import SystemClock
from humpyard.gateway import Gateway
from humpyard.http import ui
from humpyard.http.app import create_app
from humpyard.store import open_store
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, config_from
from tests.support.servers import ServerThread

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "ui"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
WIDE = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

OPS_KEY = "ops-secret-key"
VIEWER_KEY = "viewer-secret-key"
KEYS_ENV = {"OPS_KEY": OPS_KEY, "VIEW_KEY": VIEWER_KEY}
MSG = [{"role": "user", "content": "hello"}]


def console_config(alpha: str, beta: str, gamma: str, *, alpha_extra: str = "") -> str:
    """Two routes over three providers, two keys (``ops`` an admin that manages
    overrides, ``viewer`` a plain key), a selector rule; breakers trip at 3."""
    return f"""
[providers.alpha]
base_url = "{alpha}"
{alpha_extra}
[providers.beta]
base_url = "{beta}"
[providers.gamma]
base_url = "{gamma}"
health_path = "/health"
[targets.fast-small]
class = "public"
strengths = ["general"]
quality = 0.6
endpoints = [{{ provider = "alpha", model = "small" }}]
[targets.steady-large]
class = "paid"
strengths = ["general", "reasoning"]
quality = 0.9
endpoints = [{{ provider = "beta", model = "large", price = {{ input = 3.0, output = 15.0 }} }}]
[targets.spare]
class = "public"
endpoints = [{{ provider = "gamma", model = "spare" }}]

[routes.main]
type = "passthrough"
targets = ["fast-small", "steady-large"]
[routes.backup]
type = "passthrough"
targets = ["spare"]

[[select]]
name = "deep"
when = {{ profile = "deep" }}
route = "steady-large"

[keys.ops]
key_env = "OPS_KEY"
manage_overrides = true
admin = true
[keys.viewer]
key_env = "VIEW_KEY"

[health]
failure_threshold = 3
cooldown_secs = 60
"""


@contextmanager
def console_gateway(text: str, *, ledger: str | None = ":memory:",
                    env: Mapping[str, str] = KEYS_ENV) -> Iterator[Running]:
    """Serve ``text`` like ``running_gateway`` does, with the console's routes added."""
    config = config_from(text, env)
    gw = Gateway(config, open_store(ledger, SystemClock()), rng=random.Random(1))
    app = create_app(config, gateway=gw)
    if not any(getattr(r, "path", None) == "/ui" for r in app.router.routes):
        app.router.routes.extend(ui.routes())
    with ServerThread(app, lifespan="on") as srv:
        running = Running(url=srv.url, gw=gw, config=config)
        running._auth = {"authorization": f"Bearer {OPS_KEY}"}
        yield running


def chat(gw: Running, model: str = "main", key: str = OPS_KEY) -> httpx.Response:
    """One buffered chat request through the gateway."""
    with httpx.Client(timeout=30) as c:
        return c.post(gw.url + "/v1/chat/completions", json={"model": model, "messages": MSG},
                      headers={"authorization": f"Bearer {key}"})


def use_key(page: Page, key: str) -> None:
    page.fill("#key-input", key)
    page.click("#key-form button[type=submit]")


def open_console(page: Page, gw: Running, tab: str, key: str | None = OPS_KEY) -> None:
    """Load ``/ui#tab`` and, if given, enter ``key`` as an operator would."""
    page.goto(f"{gw.url}/ui#{tab}")
    if key is not None:
        use_key(page, key)


def seconds(text: str) -> int:
    """A countdown's text (``59s``, ``1m 05s``, ``2h 10m``) as seconds."""
    total = 0
    for amount, unit in re.findall(r"(\d+)([dhms])", text):
        total += int(amount) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit]
    assert re.search(r"\d", text), f"not a countdown: {text!r}"
    return total


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Module scope, not session: while Playwright's sync API is running, its event
    # loop is the thread's running loop, and every later asyncio.run() would fail.
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=WIDE)
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error"
           and not msg.text.startswith("Failed to load resource") else None)
    yield tab
    context.close()
    assert errors == [], f"script errors in the console: {errors}"


@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream, FakeUpstream]]:
    """Three scriptable upstreams: alpha, beta and gamma (gamma has a health path)."""
    with FakeUpstream() as a, FakeUpstream() as b, FakeUpstream() as c:
        yield a, b, c
