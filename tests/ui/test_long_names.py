"""Long names in the console: cut with an ellipsis, whole on hover.

A route, target, provider and key id of 256 characters each (the longest a
configuration takes), an endpoint model of 5,000 characters, and a request
for an unknown 5,000-character model go through the real gateway;
every view is opened in Chromium at 390 px and at 1440 px. No view may grow
wider than the window, every long name must sit in one ellipsised line whose
title is the whole name, and no long run of text may be laid out anywhere else.
"""

from __future__ import annotations

import time

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.ui.conftest import OPS_KEY, PHONE, console_gateway, open_console, screenshot

DESKTOP = {"width": 1440, "height": 900}
N = 5000
NAME = 256  # the longest configured name (config/resolve.py MAX_NAME_CHARS)
LONG = {kind: (kind + "-" + kind[0] * N)[:NAME if kind != "model" else N]
        for kind in ("route", "target", "provider", "model", "key")}
UNKNOWN_MODEL = ("unknown-" + "u" * N)[:N]


def config(url: str) -> str:
    return f"""
[providers."{LONG['provider']}"]
base_url = "{url}"
quota_source = "opencode-go"
[targets."{LONG['target']}"]
class = "public"
endpoints = [{{ provider = "{LONG['provider']}", model = "{LONG['model']}" }}]
[routes."{LONG['route']}"]
targets = ["{LONG['target']}"]
[keys."{LONG['key']}"]
key_env = "OPS_KEY"
manage_overrides = true
admin = true
"""


# What the page lays out: every long name element, and any long text laid out elsewhere.
PROBE = """(view) => {
  const root = document.querySelector(view);
  const names = [...root.querySelectorAll('.name')].filter((el) => el.title.length >= 200)
    .filter((el) => el.offsetParent !== null).map((el) => {
      const style = getComputedStyle(el);
      const box = el.getBoundingClientRect();
      return {title: el.title, text: el.textContent, width: box.width, height: box.height,
              cut: el.scrollWidth > el.clientWidth, overflow: style.textOverflow,
              wrap: style.whiteSpace};
    });
  const loose = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (node.textContent.length < 200 || !el || el.offsetParent === null) continue;
    if (el.closest('.name, .clamp, option, title')) continue;
    loose.push(el.tagName + ': ' + node.textContent.slice(0, 60));
  }
  const clamps = [...root.querySelectorAll('.clamp')].filter((el) => el.offsetParent !== null)
    .map((el) => el.getBoundingClientRect().height);
  // A phone may scroll a wide table sideways (it did before names were long), but by
  // less than a screen; a desktop window never has to.
  const allowed = window.innerWidth < 640 ? 2 * window.innerWidth : 0;
  const scrolled = [...root.querySelectorAll('.scroll')].filter((el) => el.offsetParent !== null)
    .filter((el) => el.scrollWidth > Math.max(el.clientWidth + 1, allowed))
    .map((el) => (el.firstElementChild.id || el.firstElementChild.className) + ' '
                 + el.scrollWidth);
  return {names, loose, clamps, scrolled, pageWidth: document.documentElement.scrollWidth,
          windowWidth: window.innerWidth};
}"""


def check_view(page: Page, view: str, expect_names: set[str]) -> None:
    r = page.evaluate(PROBE, f"#view-{view}")
    assert r["pageWidth"] <= r["windowWidth"], f"{view} is {r['pageWidth']}px wide"
    assert r["loose"] == [], f"{view} lays out a long text outside a name: {r['loose']}"
    assert r["scrolled"] == [], f"{view}: these tables scroll sideways: {r['scrolled']}"
    shown = {n["title"] for n in r["names"]}
    missing = {name[:20] for name in expect_names if not any(name in t for t in shown)}
    assert not missing, f"{view} does not show {missing}"
    for n in r["names"]:
        assert n["text"] == n["title"], "the title must hold the whole name"
        assert (n["overflow"], n["wrap"]) == ("ellipsis", "nowrap")
        assert n["cut"], f"{n['title'][:20]}... is not cut"
        assert n["width"] <= r["windowWidth"] - 20 and n["height"] < 40
    assert all(h < 120 for h in r["clamps"]), r["clamps"]


def traffic(gw) -> None:
    with httpx.Client(timeout=30, headers={"authorization": f"Bearer {OPS_KEY}"}) as c:
        assert c.post(gw.url + "/v1/chat/completions", json={
            "model": LONG["route"], "messages": [{"role": "user", "content": "hi"}]}
        ).status_code == 200
        assert c.post(gw.url + "/v1/chat/completions", json={
            "model": UNKNOWN_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        ).status_code in (400, 404)
        r = c.post(gw.url + "/v1/overrides", json={
            "kind": "disable_target", "subject": LONG["target"],
            "reason": "maintenance " + "x" * 480, "expires_in_secs": 3600})
        assert r.status_code in (200, 201), r.text
    now = time.time()
    gw.gw.store.put_quota_snapshot(LONG["provider"], {
        "provider": LONG["provider"], "source": "opencode-go", "base_url": "http://x/v1",
        "windows": {"rolling": {"percent": 10.0, "status": "ok", "resets_at": now + 3600}},
        "fetched_at": now, "polled_at": now, "error": None})


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1440px"])
def test_long_names_are_cut_with_an_ellipsis_and_whole_on_hover(browser: Browser, ups, viewport):
    a, _, _ = ups
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    tag = f"{viewport['width']}"
    try:
        with console_gateway(config(a.url), env={"OPS_KEY": OPS_KEY}) as gw:
            traffic(gw)
            open_console(page, gw, "routes")
            card = page.locator("article.route")
            expect(card).to_have_count(1)
            heading = card.locator("h3.name")
            heading.hover()  # the title, the whole name, is what hovering shows
            assert heading.get_attribute("title") == LONG["route"], "the title is not the name"
            check_view(page, "routes", {LONG["route"], LONG["target"],
                                        LONG["provider"] + "/" + LONG["model"]})
            screenshot(page, f"long-names-routes-{tag}")

            page.click('a[data-tab="decisions"]')
            rows = page.locator("tr.decision")
            expect(rows).to_have_count(2)
            rows.first.click()
            expect(page.locator("tr.detail-row")).to_have_count(1)
            rows.nth(1).click()
            expect(page.locator("tr.detail-row")).to_have_count(2)
            check_view(page, "decisions", {LONG["route"], LONG["key"], LONG["target"]})
            screenshot(page, f"long-names-decisions-{tag}")

            page.click('a[data-tab="overrides"]')
            expect(page.locator("tr.override")).to_have_count(1)
            check_view(page, "overrides", {LONG["target"], LONG["key"]})

            page.click('a[data-tab="explain"]')
            form = page.locator("#explain-form")
            form.locator("input[name=model]").fill(LONG["route"])
            form.locator("button[type=submit]").click()
            expect(page.locator(".explain-summary")).to_be_visible()
            check_view(page, "explain", {LONG["route"], LONG["target"]})
            screenshot(page, f"long-names-explain-{tag}")

            page.click('a[data-tab="quota"]')
            expect(page.locator("article.quota")).to_have_count(1)
            expect(page.locator("#stats-charts svg.chart")).to_have_count(5)
            check_view(page, "quota", {LONG["provider"]})
            screenshot(page, f"long-names-quota-{tag}")
    finally:
        context.close()
    assert errors == []

